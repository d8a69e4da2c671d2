// The model selector in the page's header: the models GET /v1/models lists, with their state
// (loaded, loading, unloaded). "auto" leaves the choice to the server: chat requests go to its
// chat model (--chat-model; by default the instruct model) and completions to its completion
// model. The playground sends the selection as "model"; the dashboard watches it (with "auto",
// the chat model: the page's own chat lands there).
import { getJson } from "./api.js";

const $ = (id) => document.getElementById(id);
const listeners = [];

// The selected model id, "" for auto.
export function selectedModel() {
  return $("model-select").value;
}

export function onModelChange(fn) {
  listeners.push(fn);
}

function label(m) {
  const meta = m.meta || {};
  const ctx = meta.n_ctx ? ` · n_ctx ${meta.n_ctx}` : "";
  return `${m.id} (${meta.status || "loaded"}${ctx})`;
}

export async function loadModels() {
  const select = $("model-select");
  try {
    const models = await getJson("/v1/models");
    const keep = select.value;
    const data = models.data || [];
    select.replaceChildren();
    if (data.length > 1) select.append(new Option("auto (chat and completion defaults)", ""));
    for (const m of data) select.append(new Option(label(m), m.id));
    if ([...select.options].some((o) => o.value === keep)) select.value = keep;
    select.title = data.length > 1 ? "the model requests go to" : "the served model";
  } catch {
    select.replaceChildren();
  }
}

export function initModels() {
  $("model-select").addEventListener("change", () => {
    for (const fn of listeners) fn(selectedModel());
  });
  // States change as models load and unload: refresh the labels now and then.
  setInterval(() => {
    if (!document.hidden) loadModels();
  }, 5000);
}
