// The page's entry point: tabs (#playground, #dashboard), the API key dialog, the model selector.
import { authRequired, getKey, setKey, onUnauthorized } from "./api.js";
import { initModels, loadModels } from "./models.js";
import { initPlayground } from "./playground.js";
import { initDashboard, setDashboardVisible, restartDashboard } from "./dashboard.js";

const $ = (id) => document.getElementById(id);
const TABS = ["playground", "dashboard"];

function showTab() {
  const name = TABS.includes(location.hash.slice(1)) ? location.hash.slice(1) : "playground";
  for (const t of TABS) {
    $(t).hidden = t !== name;
    $(`tab-${t}`).setAttribute("aria-selected", String(t === name));
  }
  setDashboardVisible(name === "dashboard");
}

function openKeyDialog(message) {
  const d = $("key-dialog");
  const m = $("key-message");
  if (message) {
    m.textContent = message;
    m.classList.add("bad");
  }
  $("key-input").value = getKey();
  if (!d.open) d.showModal();
  $("key-input").focus();
}

function initKey() {
  $("key-button").hidden = !authRequired && !getKey();
  $("key-button").addEventListener("click", () => openKeyDialog());
  $("key-form").addEventListener("submit", () => {
    setKey($("key-input").value.trim());
    $("key-message").classList.remove("bad");
    loadModels();
    restartDashboard();
  });
  $("key-cancel").addEventListener("click", () => $("key-dialog").close());
  $("key-forget").addEventListener("click", () => {
    setKey("");
    $("key-input").value = "";
  });
  onUnauthorized((message) =>
    openKeyDialog(`The server refused the key: ${message}. Enter the key the server was started with (--api-key).`));
}

function init() {
  initKey();
  initModels();
  initPlayground();
  initDashboard();
  window.addEventListener("hashchange", showTab);
  showTab();
  if (authRequired && !getKey()) openKeyDialog();
  else loadModels();
}

init();
