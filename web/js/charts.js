// Charts drawn on <canvas> by the page's own code (no library): the per-step stacked bars of
// decode and prefill tokens against the n_batch budget, line charts and stacked areas over a
// time window. Colours come from the CSS variables of web/style.css.

const PAD = { left: 44, right: 10, top: 10, bottom: 20 };

export function cssColor(name) {
  return getComputedStyle(document.documentElement).getPropertyValue(name).trim() || "#888";
}

// Sizes the canvas's backing store to its CSS box × devicePixelRatio; returns the 2D context
// (scaled to CSS pixels) and the box size, or null when the canvas is not laid out (hidden).
function prepare(canvas) {
  const rect = canvas.getBoundingClientRect();
  const w = Math.round(rect.width);
  const h = Math.round(rect.height);
  if (w < 40 || h < 40) return null;
  const dpr = window.devicePixelRatio || 1;
  if (canvas.width !== Math.round(w * dpr) || canvas.height !== Math.round(h * dpr)) {
    canvas.width = Math.round(w * dpr);
    canvas.height = Math.round(h * dpr);
  }
  const ctx = canvas.getContext("2d");
  ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
  ctx.clearRect(0, 0, w, h);
  return { ctx, w, h, plotW: w - PAD.left - PAD.right, plotH: h - PAD.top - PAD.bottom };
}

// A round axis maximum at or above v.
export function niceMax(v) {
  if (!(v > 0)) return 1;
  const p = Math.pow(10, Math.floor(Math.log10(v)));
  for (const m of [1, 1.5, 2, 2.5, 3, 4, 5, 6, 8, 10]) if (m * p >= v) return m * p;
  return 10 * p;
}

function fmtTick(v) {
  if (v >= 10000) return `${Math.round(v / 1000)}k`;
  if (v >= 1000) return `${(v / 1000).toFixed(1)}k`;
  return Number.isInteger(v) ? String(v) : v.toFixed(1);
}

// Grid, y labels at 0, max/2, max, and x labels every 15 s of a window ending now.
function axes(g, yMax, windowMs) {
  const { ctx, plotW, plotH } = g;
  ctx.font = "11px system-ui, sans-serif";
  ctx.fillStyle = cssColor("--muted");
  ctx.strokeStyle = cssColor("--line");
  ctx.lineWidth = 1;
  ctx.textAlign = "right";
  ctx.textBaseline = "middle";
  for (const f of [0, 0.5, 1]) {
    const y = PAD.top + plotH * (1 - f) + 0.5;
    ctx.beginPath();
    ctx.moveTo(PAD.left, y);
    ctx.lineTo(PAD.left + plotW, y);
    ctx.stroke();
    ctx.fillText(fmtTick(yMax * f), PAD.left - 6, y);
  }
  ctx.textAlign = "center";
  ctx.textBaseline = "top";
  const n = Math.round(windowMs / 15000);
  for (let i = 0; i <= n; ++i) {
    const x = PAD.left + (plotW * i) / n;
    const s = Math.round(((n - i) * windowMs) / n / 1000);
    ctx.fillText(s === 0 ? "now" : `−${s}s`, Math.min(Math.max(x, PAD.left + 12), PAD.left + plotW - 12), PAD.top + plotH + 5);
  }
}

function xOf(g, t, now, windowMs) {
  return PAD.left + g.plotW * (1 - (now - t) / windowMs);
}

// Stacked bars per step: decode (bottom) and prefill (top) tokens, the budget as a dashed
// line. steps: [{t, decode, prefill, budget}] in time order (t: ms on the `now` clock). When
// there are more steps than pixel columns, a column shows the mean per step of its steps.
// Returns what was drawn: {steps, decode, prefill} summed over the window.
export function drawBatchChart(canvas, steps, now, windowMs) {
  const g = prepare(canvas);
  const drawn = { steps: 0, decode: 0, prefill: 0 };
  if (!g) return drawn;
  const t0 = now - windowMs;
  let budget = 0;
  let maxTokens = 0;
  let first = steps.length;
  for (let i = steps.length - 1; i >= 0 && steps[i].t > t0; --i) {
    first = i;
    budget = Math.max(budget, steps[i].budget);
    maxTokens = Math.max(maxTokens, steps[i].decode + steps[i].prefill);
  }
  const yMax = niceMax(Math.max(budget, maxTokens, 1));
  axes(g, yMax, windowMs);
  const { ctx, plotW, plotH } = g;
  const yOf = (v) => PAD.top + plotH * (1 - v / yMax);
  const decodeColor = cssColor("--decode");
  const prefillColor = cssColor("--prefill");
  const n = steps.length - first;
  const cols = Math.max(1, Math.floor(plotW));
  const bar = (x, wPx, decode, prefill) => {
    ctx.fillStyle = decodeColor;
    ctx.fillRect(x, yOf(decode), wPx, yOf(0) - yOf(decode));
    ctx.fillStyle = prefillColor;
    ctx.fillRect(x, yOf(decode + prefill), wPx, yOf(decode) - yOf(decode + prefill));
  };
  if (n <= cols / 2) {
    // One bar per step, as wide as the gap to the previous step (1.5 to 8 px).
    let prevX = null;
    for (let i = first; i < steps.length; ++i) {
      const s = steps[i];
      const x = xOf(g, s.t, now, windowMs);
      const wPx = prevX === null ? 3 : Math.min(8, Math.max(1.5, x - prevX - 0.5));
      bar(x - wPx, wPx, s.decode, s.prefill);
      prevX = x;
    }
  } else {
    const sumD = new Float64Array(cols);
    const sumP = new Float64Array(cols);
    const cnt = new Uint32Array(cols);
    for (let i = first; i < steps.length; ++i) {
      const s = steps[i];
      const c = Math.min(cols - 1, Math.floor(((s.t - t0) / windowMs) * cols));
      sumD[c] += s.decode;
      sumP[c] += s.prefill;
      cnt[c] += 1;
    }
    for (let c = 0; c < cols; ++c)
      if (cnt[c]) bar(PAD.left + (c * plotW) / cols, plotW / cols, sumD[c] / cnt[c], sumP[c] / cnt[c]);
  }
  for (let i = first; i < steps.length; ++i) {
    drawn.steps += 1;
    drawn.decode += steps[i].decode;
    drawn.prefill += steps[i].prefill;
  }
  if (budget > 0) {
    ctx.strokeStyle = cssColor("--budget");
    ctx.setLineDash([5, 4]);
    ctx.lineWidth = 1.25;
    ctx.beginPath();
    ctx.moveTo(PAD.left, Math.round(yOf(budget)) + 0.5);
    ctx.lineTo(PAD.left + plotW, Math.round(yOf(budget)) + 0.5);
    ctx.stroke();
    ctx.setLineDash([]);
    ctx.fillStyle = cssColor("--budget");
    ctx.textAlign = "left";
    ctx.textBaseline = "bottom";
    ctx.fillText(`n_batch ${budget}`, PAD.left + 4, Math.round(yOf(budget)) - 2);
  }
  return drawn;
}

// Lines over the window. series: [{points: [[t, v], ...], color}]. yMax: fixed maximum, or
// null for a round maximum above the data.
export function drawLines(canvas, series, now, windowMs, yMax = null) {
  const g = prepare(canvas);
  if (!g) return;
  const t0 = now - windowMs;
  let top = 0;
  for (const s of series) for (const [t, v] of s.points) if (t >= t0) top = Math.max(top, v);
  const max = yMax || niceMax(top);
  axes(g, max, windowMs);
  const { ctx, plotH } = g;
  const yOf = (v) => PAD.top + plotH * (1 - Math.min(v, max) / max);
  for (const s of series) {
    ctx.strokeStyle = s.color;
    ctx.lineWidth = 1.75;
    ctx.beginPath();
    let started = false;
    for (const [t, v] of s.points) {
      if (t < t0) continue;
      const x = xOf(g, t, now, windowMs);
      if (!started) ctx.moveTo(x, yOf(v));
      else ctx.lineTo(x, yOf(v));
      started = true;
    }
    ctx.stroke();
  }
}

// Stacked areas over the window. points: [[t, v0, v1, ...]]; colors[i] fills layer i (bottom
// first); the stack is drawn against a fixed total (yMax).
export function drawStackedArea(canvas, points, colors, now, windowMs, yMax) {
  const g = prepare(canvas);
  if (!g) return;
  const t0 = now - windowMs;
  const max = niceMax(yMax);
  axes(g, max, windowMs);
  const { ctx, plotH } = g;
  const yOf = (v) => PAD.top + plotH * (1 - Math.min(v, max) / max);
  const visible = points.filter((p) => p[0] >= t0);
  if (visible.length < 2) return;
  for (let layer = colors.length - 1; layer >= 0; --layer) {
    ctx.fillStyle = colors[layer];
    ctx.beginPath();
    visible.forEach((p, i) => {
      let top = 0;
      for (let k = 1; k <= layer + 1; ++k) top += p[k];
      const x = xOf(g, p[0], now, windowMs);
      if (i === 0) ctx.moveTo(x, yOf(top));
      else ctx.lineTo(x, yOf(top));
    });
    for (let i = visible.length - 1; i >= 0; --i) ctx.lineTo(xOf(g, visible[i][0], now, windowMs), yOf(0));
    ctx.closePath();
    ctx.fill();
  }
}
