// The live scheduler dashboard: reads GET /v1/dashboard/events (snapshots a few times a
// second, docs/API.md), keeps the last minute of step records and snapshots, and draws the
// tiles, charts, counters, settings and the table of active requests.
import { apiFetch, readEvents, ApiError } from "./api.js";
import { cssColor, drawBatchChart, drawLines, drawStackedArea } from "./charts.js";
import { onModelChange, selectedModel } from "./models.js";

const WINDOW_MS = 60000;
const $ = (id) => document.getElementById(id);

const state = {
  running: false,         // the stream loop runs
  controller: null,
  steps: [],              // {t, decode, prefill, sampled, budget} of the last minute
  frames: [],             // {t, running, queued, used, cached, free} per snapshot
  last: null,             // the last snapshot
  nFrames: 0,
  arrivals: [],           // performance.now() of the last 240 snapshots
  drawMs: [],             // time to update the page per snapshot (last 240)
  drawn: { steps: 0, decode: 0, prefill: 0 },
  visible: false,
  wake: null,             // resolves a reconnect wait early (new key)
};

// What the browser test reads (tests/python/test_webui_browser.py).
window.ubatchDashboard = {
  snapshot: () => state.last,
  drawn: () => ({ ...state.drawn }),
  stats: () => {
    const gaps = [];
    for (let i = 1; i < state.arrivals.length; ++i) gaps.push(state.arrivals[i] - state.arrivals[i - 1]);
    const sorted = (a) => [...a].sort((x, y) => x - y);
    const pct = (a, p) => (a.length ? sorted(a)[Math.min(a.length - 1, Math.ceil((p / 100) * a.length) - 1)] : 0);
    return {
      frames: state.nFrames,
      gap_p50_ms: pct(gaps, 50),
      gap_max_ms: gaps.length ? Math.max(...gaps) : 0,
      draw_p50_ms: pct(state.drawMs, 50),
      draw_max_ms: state.drawMs.length ? Math.max(...state.drawMs) : 0,
    };
  },
};

function fmt(v, digits = 0) {
  if (v === null || v === undefined || Number.isNaN(v)) return "–";
  return Number(v).toLocaleString("en-US", { maximumFractionDigits: digits, minimumFractionDigits: digits });
}

function fmtMs(ms) {
  if (ms === null || ms === undefined) return "–";
  if (ms >= 10000) return `${(ms / 1000).toFixed(1)} s`;
  if (ms >= 1000) return `${(ms / 1000).toFixed(2)} s`;
  return `${ms >= 100 ? Math.round(ms) : ms.toFixed(1)} ms`;
}

function pct(ratio) {
  return ratio === null || ratio === undefined ? "–" : `${(100 * ratio).toFixed(1)}%`;
}

function setText(id, text) {
  const e = $(id);
  if (e.textContent !== text) e.textContent = text;
}

function fillList(id, pairs) {
  const dl = $(id);
  const items = [];
  for (const [k, v] of pairs) {
    const dt = document.createElement("dt");
    dt.textContent = k;
    const dd = document.createElement("dd");
    dd.textContent = v;
    items.push(dt, dd);
  }
  dl.replaceChildren(...items);
}

function onSnapshot(s) {
  const t0 = performance.now();
  state.last = s;
  state.nFrames += 1;
  state.arrivals.push(t0);
  if (state.arrivals.length > 240) state.arrivals.shift();
  const now = s.now_ms;
  const f = s.steps.fields;
  const at = Object.fromEntries(f.map((name, i) => [name, i]));
  if (s.steps.gap) state.steps = [];  // records were skipped: start the window afresh
  for (const r of s.steps.rows)
    state.steps.push({ t: r[at.end_ms], decode: r[at.decode], prefill: r[at.prefill], sampled: r[at.sampled], budget: r[at.budget] });
  let drop = 0;
  while (drop < state.steps.length && state.steps[drop].t < now - WINDOW_MS) ++drop;
  if (drop) state.steps.splice(0, drop);
  state.frames.push({ t: now, running: s.sequences.running, queued: s.sequences.queued, used: s.kv.used, cached: s.kv.cached, free: s.kv.free });
  while (state.frames.length && state.frames[0].t < now - WINDOW_MS) state.frames.shift();
  if (state.visible) render();
  state.drawMs.push(performance.now() - t0);
  if (state.drawMs.length > 240) state.drawMs.shift();
}

function renderTiles(s) {
  const st = s.settings;
  setText("t-tps", fmt(s.throughput.output_tokens_per_s, 1));
  setText("t-tps-sub", `prefill ${fmt(s.throughput.prefill_tokens_per_s)}/s · ${fmt(s.throughput.steps_per_s, 1)} steps/s`);
  setText("t-seqs", `${s.sequences.running} / ${st.n_parallel}`);
  setText("t-seqs-sub", `running · ${s.sequences.queued} queued · ${s.sequences.preempted} preempted`);
  setText("t-fill", pct(s.throughput.batch_fill));
  setText("t-fill-sub", `of n_batch ${st.n_batch} · engine busy ${pct(s.throughput.busy)}`);
  setText("t-kv", `${fmt(s.kv.used)} / ${fmt(s.kv.blocks)}`);
  setText("t-kv-sub", `used · ${fmt(s.kv.cached)} cached · ${fmt(s.kv.free)} free`);
  const bar = $("kv-bar");
  bar.children[0].style.width = `${(100 * s.kv.used) / Math.max(1, s.kv.blocks)}%`;
  bar.children[1].style.width = `${(100 * s.kv.cached) / Math.max(1, s.kv.blocks)}%`;
  const hit1m = s.prefix_cache.hit_rate_1m;
  setText("t-hit", pct(hit1m !== null ? hit1m : s.prefix_cache.hit_rate));
  setText("t-hit-sub", `${hit1m !== null ? "last minute" : "no prompts this minute"} · all time ${pct(s.prefix_cache.hit_rate)}`);
  const lat = s.latency;
  // p50 as the value, p99 in the line below: both in one value were cut at a tile's width.
  setText("t-ttft", fmtMs(lat.ttft_ms.count ? lat.ttft_ms.p50 : null));
  setText("t-ttft-sub", `p99 ${fmtMs(lat.ttft_ms.count ? lat.ttft_ms.p99 : null)} · ${fmt(lat.ttft_ms.count)} requests`);
  setText("t-itl", fmtMs(lat.itl_ms.count ? lat.itl_ms.p50 : null));
  setText("t-itl-sub", `p99 ${fmtMs(lat.itl_ms.count ? lat.itl_ms.p99 : null)} · ${fmt(lat.itl_ms.count)} gaps`);
}

function renderCharts(s) {
  const now = s.now_ms;
  state.drawn = drawBatchChart($("chart-batch"), state.steps, now, WINDOW_MS);
  // Output tokens/s per second of steps.
  const perSecond = new Map();
  for (const st of state.steps) {
    const k = Math.floor((now - st.t) / 1000);
    perSecond.set(k, (perSecond.get(k) || 0) + st.sampled);
  }
  const tps = [];
  for (let k = 59; k >= 1; --k) tps.push([now - k * 1000, perSecond.get(k) || 0]);
  drawLines($("chart-tps"), [{ points: tps, color: cssColor("--tps") }], now, WINDOW_MS);
  drawLines($("chart-seqs"), [
    { points: state.frames.map((f) => [f.t, f.running]), color: cssColor("--running") },
    { points: state.frames.map((f) => [f.t, f.queued]), color: cssColor("--queued") },
  ], now, WINDOW_MS);
  // KV: used and cached blocks (the rest is free); the axis follows the data, the cache's
  // size is in the panel title.
  drawStackedArea($("chart-kv"), state.frames.map((f) => [f.t, f.used, f.cached]),
    [cssColor("--kv-used"), cssColor("--kv-cached")], now, WINDOW_MS,
    Math.min(s.kv.blocks, Math.max(1, ...state.frames.map((f) => f.used + f.cached))));
  setText("kv-total", `of ${fmt(s.kv.blocks)}`);
}

function renderCounters(s) {
  const r = s.requests_total;
  fillList("counts-requests", [
    ["submitted", fmt(r.submitted)], ["finished", fmt(r.finished)], ["cancelled", fmt(r.cancelled)],
    ["failed", fmt(r.failed)], ["rejected", fmt(r.rejected)], ["generated tokens", fmt(s.tokens.generated)],
    ["steps", fmt(s.tokens.steps)],
    ["batch fill, all time", pct(s.tokens.step_budget ? s.tokens.step_tokens / s.tokens.step_budget : null)],
  ]);
  fillList("counts-pressure", [
    ["preempted: KV memory", fmt(s.preemptions.memory)], ["preempted: priority", fmt(s.preemptions.priority)],
    ["rejected: queue full", fmt(s.rejections.queue_full)], ["rejected: too long", fmt(s.rejections.too_long)],
    ["rejected: invalid", fmt(s.rejections.invalid)], ["rejected: deadline", fmt(s.rejections.deadline)],
    ["deadline missed: queued", fmt(s.deadline_misses.queued)], ["deadline missed: running", fmt(s.deadline_misses.running)],
  ]);
  const st = s.settings;
  fillList("settings-list", [
    ["policy", st.policy], ["n_parallel", st.n_parallel], ["n_batch / n_ubatch", `${st.n_batch} / ${st.n_ubatch}`],
    ["n_ctx (per request)", `${fmt(st.n_ctx)} (${fmt(st.n_ctx_seq)})`],
    ["KV", `${fmt(st.kv_blocks)} blocks × ${st.kv_block_size} tokens, ${st.kv_type}`],
    ["threads", st.threads], ["max queue", st.max_queue], ["batch window", `${st.batch_window_ms} ms`],
    ["λ / μ", `${st.lambda} / ${st.mu}`], ["aging", `${st.aging_ms} ms`],
    ["preempt margin / min run", `${st.preempt_margin} / ${st.preempt_min_run_ms} ms`],
  ]);
}

function cell(text, className) {
  const td = document.createElement("td");
  if (className) td.className = className;
  td.textContent = text;
  return td;
}

function renderRequests(s) {
  const rows = [];
  for (const r of s.requests.rows) {
    const tr = document.createElement("tr");
    tr.append(cell(r.id.toString(16)));
    const stateCell = cell("");
    const badge = document.createElement("span");
    badge.className = `state ${r.state}`;
    badge.textContent = r.state;
    stateCell.append(badge);
    tr.append(stateCell);
    tr.append(cell(r.rank !== r.priority ? `${r.priority} (rank ${r.rank})` : String(r.priority)));
    tr.append(cell(r.deadline_ms === null ? "–" : `${fmtMs(r.deadline_ms)} (${fmtMs(Math.max(0, r.deadline_left_ms))} left)`));
    const prompt = cell(`${r.prompt_tokens}${r.cached_tokens ? ` (${r.cached_tokens} cached)` : ""}`);
    if (r.state === "prefilling") {
      const bar = document.createElement("span");
      bar.className = "bar";
      const fill = document.createElement("span");
      fill.style.width = `${Math.min(100, (100 * r.computed_tokens) / Math.max(1, r.prompt_tokens))}%`;
      bar.append(fill);
      prompt.append(bar);
    }
    tr.append(prompt);
    tr.append(cell(`${r.generated_tokens} / ${r.max_tokens * r.n}`));
    tr.append(cell(String(r.preempted)));
    tr.append(cell(r.ttft_ms === null ? "–" : fmtMs(r.ttft_ms)));
    tr.append(cell(fmtMs(r.age_ms)));
    rows.push(tr);
  }
  $("requests-body").replaceChildren(...rows);
  const shown = s.requests.rows.length;
  setText("requests-note", shown < s.requests.total ? `${shown} of ${s.requests.total} shown (oldest first)` : `${s.requests.total} active`);
}

function render() {
  const s = state.last;
  if (!s) return;
  renderTiles(s);
  renderCharts(s);
  renderCounters(s);
  renderRequests(s);
  const e = s.engine;
  const share = e.busy_ms > 0 ? (100 * e.live_view_ms) / e.busy_ms : 0;
  // Every model served: its state, the requests it answers and those waiting for it to load.
  const models = (s.models || []).map((m) =>
    `${m.id}: ${m.status}, ${m.requests_active} active` + (m.requests_waiting ? `, ${m.requests_waiting} waiting to load` : ""));
  setText("dash-footnote",
    `Model ${s.settings.model}` + (models.length > 1 ? ` (served: ${models.join("; ")})` : "") + " · " +
    `Snapshot every ${s.interval_ms} ms from GET /v1/dashboard/events · ${s.http.dashboard_streams} dashboard stream(s) open · ` +
    `engine time publishing the request table: ${fmt(e.live_view_ms, 1)} ms of ${fmt(e.busy_ms / 1000, 1)} s busy (${share.toFixed(3)}%)`);
}

function setConn(text, cls) {
  const e = $("conn-status");
  e.textContent = text;
  e.className = `conn ${cls || ""}`;
}

const sleep = (ms) => new Promise((resolve) => {
  const timer = setTimeout(resolve, ms);
  state.wake = () => {
    clearTimeout(timer);
    resolve();
  };
});

async function streamLoop() {
  let backoff = 500;
  while (state.running) {
    state.controller = new AbortController();
    const signal = state.controller.signal;
    try {
      const model = selectedModel() ? `&model=${encodeURIComponent(selectedModel())}` : "";
      const res = await apiFetch(`/v1/dashboard/events?interval_ms=250${model}`, { signal, headers: { Accept: "text/event-stream" } });
      setConn("live", "live");
      backoff = 500;
      for await (const ev of readEvents(res, signal)) if (ev.event === "snapshot") onSnapshot(JSON.parse(ev.data));
      if (!state.running) break;
      setConn("stream ended; reconnecting", "down");
    } catch (e) {
      if (!state.running) break;
      if (e instanceof ApiError && e.status === 401) {
        setConn("API key needed", "down");
        await sleep(60000);  // until a new key wakes it
        continue;
      }
      setConn(`disconnected (${e.message}); reconnecting`, "down");
    }
    await sleep(backoff);
    backoff = Math.min(backoff * 2, 5000);
  }
}

export function startDashboard() {
  if (state.running) return;
  state.running = true;
  streamLoop();
}

// A new key: reconnect now.
export function restartDashboard() {
  if (!state.running) return;
  if (state.controller) state.controller.abort();
  if (state.wake) state.wake();
}

export function setDashboardVisible(visible) {
  state.visible = visible;
  if (visible) {
    startDashboard();
    render();
  }
}

export function initDashboard() {
  onModelChange(() => restartDashboard());
  window.addEventListener("resize", () => {
    if (state.visible) render();
  });
}
