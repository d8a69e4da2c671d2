// The playground: multi-turn chat (system prompt, streaming, stop) or raw completion against
// /v1/chat/completions and /v1/completions, with the sampling controls and, per reply, its
// tokens, TTFT, tokens/s, finish reason and cached prompt tokens.
import { apiFetch, readEvents, ApiError } from "./api.js";
import { selectedModel } from "./models.js";

const $ = (id) => document.getElementById(id);

const state = {
  history: [],        // chat turns so far: {role, content}
  controller: null,   // AbortController of the reply in flight
};

function mode() {
  return $("mode-completion").checked ? "completion" : "chat";
}

// "a, b\,c, \n" → ["a", "b,c", "\n"]: commas separate; \n \t \, \\ are escapes.
export function parseStops(text) {
  const out = [];
  let cur = "";
  for (let i = 0; i < text.length; ++i) {
    const c = text[i];
    if (c === "\\" && i + 1 < text.length) {
      const n = text[++i];
      cur += n === "n" ? "\n" : n === "t" ? "\t" : n;
    } else if (c === ",") {
      out.push(cur);
      cur = "";
    } else {
      cur += c;
    }
  }
  out.push(cur);
  return out.map((s) => s.replace(/^ +| +$/g, "")).filter((s) => s.length > 0);
}

function numberField(id, parse = Number) {
  const v = $(id).value.trim();
  if (v === "") return undefined;
  const n = parse(v);
  return Number.isFinite(n) ? n : undefined;
}

// The request fields the controls set; empty controls are left out (server defaults).
function samplingFields() {
  const f = {
    temperature: numberField("temperature"),
    top_k: numberField("top-k", (v) => parseInt(v, 10)),
    top_p: numberField("top-p"),
    min_p: numberField("min-p"),
    max_tokens: numberField("max-tokens", (v) => parseInt(v, 10)),
    seed: numberField("seed", (v) => parseInt(v, 10)),
    priority: numberField("priority", (v) => parseInt(v, 10)),
  };
  const stops = parseStops($("stop").value);
  if (stops.length) f.stop = stops;
  if ($("ignore-eos").checked) f.ignore_eos = true;
  for (const k of Object.keys(f)) if (f[k] === undefined) delete f[k];
  return f;
}

function element(tag, className, text) {
  const e = document.createElement(tag);
  if (className) e.className = className;
  if (text !== undefined) e.textContent = text;
  return e;
}

function scrollDown() {
  const m = $("messages");
  m.scrollTop = m.scrollHeight;
}

function fmtMs(ms) {
  return ms >= 1000 ? `${(ms / 1000).toFixed(2)} s` : `${Math.round(ms)} ms`;
}

// One reply being streamed into the page.
class Reply {
  constructor(kind, promptEcho) {
    this.box = element("div", `msg ${kind}`);
    if (promptEcho) this.box.append(element("span", "prompt-echo", promptEcho));
    this.textEl = element("span", "text streaming");
    this.statsEl = element("span", "stats", "waiting for the first token…");
    this.box.append(this.textEl, this.statsEl);
    $("messages").append(this.box);
    this.text = "";
    this.t0 = performance.now();
    this.tFirst = null;
    this.tLast = null;
    this.chunks = 0;
    this.finish = null;
    this.usage = null;
    this.timings = null;
    scrollDown();
  }

  add(piece) {
    if (!piece) return;
    const now = performance.now();
    if (this.tFirst === null) this.tFirst = now;
    this.tLast = now;
    this.chunks += 1;
    this.text += piece;
    this.textEl.textContent = this.text;
    this.statsEl.textContent = `${this.chunks} tokens…`;
    scrollDown();
  }

  // Ends the reply: `outcome` is "done", "stopped" or an Error.
  end(outcome) {
    this.textEl.classList.remove("streaming");
    const parts = [];
    const tokens = this.usage ? this.usage.completion_tokens : this.chunks;
    parts.push(`${tokens} tokens`);
    if (this.tFirst !== null) {
      parts.push(`TTFT ${fmtMs(this.tFirst - this.t0)}`);
      if (tokens > 1 && this.tLast > this.tFirst)
        parts.push(`${((tokens - 1) / ((this.tLast - this.tFirst) / 1000)).toFixed(1)} tokens/s`);
    }
    let finish = this.finish;
    if (outcome === "stopped") finish = "stopped";
    if (outcome instanceof Error) finish = "error";
    parts.push(`finish: ${finish || "?"}`);
    if (this.usage) {
      const cached = (this.usage.prompt_tokens_details || {}).cached_tokens || 0;
      parts.push(`prompt ${this.usage.prompt_tokens} tokens (${cached} cached)`);
    }
    if (this.timings && this.timings.queue_ms !== undefined && this.timings.queue_ms >= 1)
      parts.push(`queued ${fmtMs(this.timings.queue_ms)}`);
    this.statsEl.textContent = parts.join(" · ");
    if (outcome instanceof Error) this.box.append(element("div", "error", outcome.message));
    this.box.dataset.finish = finish || "";
    this.box.dataset.tokens = String(tokens);
    this.box.classList.add("done");
    scrollDown();
  }
}

function setBusy(busy) {
  $("send-button").disabled = busy;
  $("stop-button").disabled = !busy;
}

async function stream(path, body, reply) {
  state.controller = new AbortController();
  const signal = state.controller.signal;
  setBusy(true);
  try {
    const res = await apiFetch(path, {
      method: "POST",
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify({ ...body, ...(selectedModel() ? { model: selectedModel() } : {}), stream: true, stream_options: { include_usage: true } }),
      signal,
    });
    for await (const ev of readEvents(res, signal)) {
      if (ev.data === "[DONE]") break;
      const chunk = JSON.parse(ev.data);
      if (chunk.error) throw new ApiError(500, chunk.error.message || "stream error");
      for (const c of chunk.choices || []) {
        reply.add(c.delta ? c.delta.content : c.text);
        if (c.finish_reason) reply.finish = c.finish_reason;
      }
      if (chunk.usage) reply.usage = chunk.usage;
      if (chunk.timings) reply.timings = chunk.timings;
    }
    if (signal.aborted) reply.end("stopped");
    else reply.end("done");
  } catch (e) {
    if (signal.aborted || (e && e.name === "AbortError")) reply.end("stopped");
    else reply.end(e instanceof Error ? e : new Error(String(e)));
  } finally {
    state.controller = null;
    setBusy(false);
  }
}

async function send() {
  if (state.controller) return;
  const input = $("input");
  const text = input.value;
  if (!text.trim()) return;
  input.value = "";
  if (mode() === "chat") {
    state.history.push({ role: "user", content: text });
    $("messages").append(element("div", "msg user", text));
    const messages = [];
    const system = $("system-prompt").value.trim();
    if (system) messages.push({ role: "system", content: system });
    messages.push(...state.history);
    const reply = new Reply("assistant");
    await stream("/v1/chat/completions", { messages, ...samplingFields() }, reply);
    state.history.push({ role: "assistant", content: reply.text });
  } else {
    const reply = new Reply("completion", text);
    await stream("/v1/completions", { prompt: text, ...samplingFields() }, reply);
  }
}

function clearConversation() {
  if (state.controller) state.controller.abort();
  state.history = [];
  $("messages").replaceChildren();
}

function applyMode() {
  const chat = mode() === "chat";
  $("system-row").hidden = !chat;
  $("input").placeholder = chat ? "Message (Enter sends, Shift+Enter: new line)" : "Prompt to continue (Enter sends)";
}

export function initPlayground() {
  $("send-form").addEventListener("submit", (e) => {
    e.preventDefault();
    send();
  });
  $("input").addEventListener("keydown", (e) => {
    if (e.key === "Enter" && !e.shiftKey && !e.isComposing) {
      e.preventDefault();
      send();
    }
  });
  $("stop-button").addEventListener("click", () => {
    if (state.controller) state.controller.abort();
  });
  $("clear-button").addEventListener("click", clearConversation);
  for (const id of ["mode-chat", "mode-completion"])
    $(id).addEventListener("change", () => {
      clearConversation();
      applyMode();
    });
  applyMode();
}
