// Talking to the server: the API key (kept in localStorage, sent as "Authorization: Bearer"),
// JSON calls, and Server-Sent Events read with fetch() — an EventSource cannot send the
// Authorization header, so the page reads every stream (completions and the dashboard's
// events) through one parser of the WHATWG event-stream format.

const KEY_STORAGE = "ubatch.apiKey";

// "required" when the server runs with --api-key (filled in by the server into <html data-auth>).
export const authRequired = document.documentElement.dataset.auth === "required";

export function getKey() {
  try {
    return localStorage.getItem(KEY_STORAGE) || "";
  } catch {
    return "";  // storage disabled: the key lives only in memory
  }
}

let memoryKey = "";
export function setKey(key) {
  memoryKey = key;
  try {
    if (key) localStorage.setItem(KEY_STORAGE, key);
    else localStorage.removeItem(KEY_STORAGE);
  } catch { /* storage disabled */ }
}

function currentKey() {
  return getKey() || memoryKey;
}

// An error the server answered (status and its OpenAI-style message) or a network failure.
export class ApiError extends Error {
  constructor(status, message, code) {
    super(message);
    this.status = status;
    this.code = code || null;
  }
}

// Listeners told when the server refuses the key (401): the page asks for it again.
const unauthorizedListeners = [];
export function onUnauthorized(fn) {
  unauthorizedListeners.push(fn);
}

async function errorOf(res) {
  let message = `HTTP ${res.status}`;
  let code = null;
  try {
    const body = await res.json();
    if (body && body.error) {
      message = body.error.message || message;
      code = body.error.code || null;
    }
  } catch { /* not JSON */ }
  if (res.status === 401) for (const fn of unauthorizedListeners) fn(message);
  return new ApiError(res.status, message, code);
}

// fetch() with the key; throws ApiError for non-2xx answers.
export async function apiFetch(path, options = {}) {
  const headers = new Headers(options.headers || {});
  const key = currentKey();
  if (key) headers.set("Authorization", `Bearer ${key}`);
  const res = await fetch(path, { ...options, headers, cache: "no-store" });
  if (!res.ok) throw await errorOf(res);
  return res;
}

export async function getJson(path) {
  return (await apiFetch(path)).json();
}

// Parses an event stream (text/event-stream) from a fetch() response body. Yields
// {event, data} per event: `event` defaults to "message"; `data` joins multi-line data with
// "\n". Handles CRLF/LF/CR line ends, comments and events split across reads.
export async function* readEvents(res, signal) {
  const reader = res.body.getReader();
  const decoder = new TextDecoder();
  let buffer = "";
  let event = "message";
  let data = [];
  const onAbort = () => reader.cancel().catch(() => {});
  if (signal) signal.addEventListener("abort", onAbort, { once: true });
  try {
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      buffer += decoder.decode(value, { stream: true });
      let start = 0;
      for (;;) {
        const cr = buffer.indexOf("\r", start);
        const lf = buffer.indexOf("\n", start);
        if (cr < 0 && lf < 0) break;
        let end = cr < 0 ? lf : lf < 0 ? cr : Math.min(cr, lf);
        // A CR at the very end may be the first half of CRLF: wait for more.
        if (end === cr && end === buffer.length - 1) break;
        const line = buffer.slice(start, end);
        start = end + (buffer[end] === "\r" && buffer[end + 1] === "\n" ? 2 : 1);
        if (line === "") {
          if (data.length) yield { event, data: data.join("\n") };
          event = "message";
          data = [];
          continue;
        }
        if (line.startsWith(":")) continue;  // comment
        const colon = line.indexOf(":");
        const field = colon < 0 ? line : line.slice(0, colon);
        let val = colon < 0 ? "" : line.slice(colon + 1);
        if (val.startsWith(" ")) val = val.slice(1);
        if (field === "data") data.push(val);
        else if (field === "event") event = val || "message";
      }
      buffer = buffer.slice(start);
    }
  } finally {
    if (signal) signal.removeEventListener("abort", onAbort);
  }
}
