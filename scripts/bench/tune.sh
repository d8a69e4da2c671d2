#!/usr/bin/env bash
# Real (not simulated) tuning scan of `ubatch serve`, driven by `ubatch load` on loopback.
#
# For each knob it starts a fresh server with one value changed from the defaults, runs one
# closed-loop (or open-loop) load for DURATION seconds, scrapes /metrics for preemptions,
# and writes one JSON file per run plus a markdown table (summary.md) of all runs.
# Every scan is repeated REPS times, interleaved (rep 1 of every value, then rep 2, ...), so
# a slow minute on a shared machine hits all values alike; the table reports the median and
# the spread (min..max) over the repetitions.
#
# Usage: scripts/bench/tune.sh [OUT_DIR]        (default: bench-results/tune)
# Environment: UBATCH (binary, default build/ubatch), MODEL (default: the embedded model),
#   THREADS (2), DURATION (10 s), REPS (2), PORT (8097), SCANS ("np nb win kv": which scans).
# Numbers from this script are quoted in docs/BENCHMARKS.md ("Tuning the serve defaults"); the
# scans other than nb pin --n-batch 512, the budget they were measured with.
set -euo pipefail
cd "$(dirname "$0")/../.."
OUT=${1:-bench-results/tune}
UBATCH=${UBATCH:-build/ubatch}
MODEL=${MODEL:-models/gemma-3-270m-q4_k_m.gguf}
THREADS=${THREADS:-2}
DURATION=${DURATION:-10}
REPS=${REPS:-2}
PORT=${PORT:-8097}
SCANS=${SCANS:-"np nb win kv"}
URL="http://127.0.0.1:$PORT"
mkdir -p "$OUT"
[ -x "$UBATCH" ] || { echo "tune.sh: $UBATCH not found (run scripts/setup.sh --no-run)" >&2; exit 1; }
[ -f "$MODEL" ] || { echo "tune.sh: $MODEL not found" >&2; exit 1; }

# The request mix: the load driver's default lengths, greedy, fixed length (ignore_eos) so
# every configuration produces the same work (the n_batch scan uses longer prompts).
MIX=(--max-tokens 16:128 --ignore-eos --temperature 0 -q --duration "$DURATION")
PROMPTS="--prompt-tokens 32:256"

SERVER_PID=
trap '[ -n "$SERVER_PID" ] && kill -INT "$SERVER_PID" 2>/dev/null; wait 2>/dev/null' EXIT
trap 'exit 130' INT TERM

wait_health() {
  for _ in $(seq 1 150); do curl -sf "$URL/health" >/dev/null 2>&1 && return 0; sleep 0.2; done
  return 1
}

# run NAME VALUE "SERVE ARGS" "LOAD ARGS": one server, one load, one JSON file.
run() {
  local scan=$1 value=$2 rep=$3 serve_args=$4 load_args=$5
  local base="$OUT/${scan}_${value}_r${rep}"
  if curl -sf "$URL/health" >/dev/null 2>&1; then
    echo "tune.sh: something already answers on port $PORT (set PORT)" >&2; exit 1
  fi
  # shellcheck disable=SC2086
  "$UBATCH" serve -m "$MODEL" -t "$THREADS" --port "$PORT" $serve_args >"$base.serve.log" 2>&1 &
  local pid=$!
  SERVER_PID=$pid
  if ! wait_health; then echo "tune.sh: server did not start ($base.serve.log)" >&2; kill "$pid" 2>/dev/null; return 1; fi
  # shellcheck disable=SC2086
  "$UBATCH" load --url "$URL" "${MIX[@]}" $load_args --json "$base.json" >"$base.load.txt" 2>&1 || true
  curl -sf "$URL/metrics" >"$base.metrics.txt" || true
  kill -INT "$pid"; wait "$pid" || true
  SERVER_PID=
  printf '%-4s %-8s rep %s done\n' "$scan" "$value" "$rep"
}

for rep in $(seq 1 "$REPS"); do
  for scan in $SCANS; do
    case $scan in
      np)  # most sequences decoding at once; 32 users keep every slot busy
        for v in 1 2 4 8 16 32 64; do
          run np "$v" "$rep" "--n-ctx 32768 --n-batch $((v > 512 ? v : 512)) --n-parallel $v" "--users 32 $PROMPTS"
        done ;;
      nb)  # logical batch (token budget per step); longer prompts make chunking matter
        for v in 32 64 128 256 512 2048; do
          run nb "$v" "$rep" "--n-ctx 32768 --n-parallel 16 --n-batch $v --n-ubatch $((v < 512 ? v : 512))" \
              "--users 16 --prompt-tokens 64:768"
        done ;;
      win)  # batch window under open-loop arrivals (below saturation)
        for v in 0 2 5 10 25; do
          run win "$v" "$rep" "--n-ctx 32768 --n-batch 512 --n-parallel 16 --batch-window-ms $v" "--rate 1.5 $PROMPTS"
        done ;;
      kv)  # KV cache size as a share of available memory; 32 users, 32 slots
        for v in 0.0005 0.001 0.002 0.005 0.02; do
          run kv "$v" "$rep" "--kv-cache-fraction $v --n-batch 512 --n-parallel 32" "--users 32 $PROMPTS"
        done ;;
      *) echo "tune.sh: unknown scan $scan" >&2; exit 2 ;;
    esac
  done
done

python3 - "$OUT" <<'EOF'
import glob, json, os, re, statistics, sys
out = sys.argv[1]
runs = {}
for path in sorted(glob.glob(os.path.join(out, "*_r*.json"))):
    scan, value, rep = re.match(r"(\w+?)_([\d.]+)_r(\d+)\.json", os.path.basename(path)).groups()
    r = json.load(open(path))["result"]
    m = open(path[:-5] + ".metrics.txt").read() if os.path.exists(path[:-5] + ".metrics.txt") else ""
    def metric(name):  # summed over the family's labels (e.g. preemptions by cause)
        hits = re.findall(r"^" + name + r"(?:\{[^}]*\})?\s+([0-9.eE+-]+)$", m, re.M)
        return sum(float(h) for h in hits) if hits else float("nan")
    log = open(path[:-5] + ".serve.log").read()
    cells = re.search(r"n_ctx (\d+)", log)
    runs.setdefault((scan, float(value)), []).append({
        "tok_s": r["output_tokens_per_s"], "ttft50": r["ttft_ms"]["p50"], "ttft99": r["ttft_ms"]["p99"],
        "tpot50": r["tpot_ms"]["p50"], "itl99": r["itl_ms"]["p99"], "errors": r["errors"],
        "preempt": metric("ubatch_preemptions_total"),
        "cells": int(cells.group(1)) if cells else 0})
titles = {"np": "--n-parallel (32 users)", "nb": "--n-batch (16 users, prompts 64-768)",
          "win": "--batch-window-ms (open loop, 1.5 req/s)", "kv": "--kv-cache-fraction (32 users, -np 32)"}
def cell(vals, fmt):
    med = statistics.median(vals)
    return fmt.format(med) + (f" ({fmt.format(min(vals))}..{fmt.format(max(vals))})" if len(vals) > 1 else "")
lines = []
for scan in ["np", "nb", "win", "kv"]:
    keys = sorted(k for k in runs if k[0] == scan)
    if not keys: continue
    lines += ["", f"### {titles[scan]}", "",
              "| value | output tok/s | TTFT p50 ms | TTFT p99 ms | TPOT p50 ms | ITL p99 ms | preemptions | KV cells | errors | reps |",
              "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for k in keys:
        rs = runs[k]
        g = lambda f: [x[f] for x in rs]
        lines.append(f"| {k[1]:g} | {cell(g('tok_s'), '{:.1f}')} | {cell(g('ttft50'), '{:.0f}')} | "
                     f"{cell(g('ttft99'), '{:.0f}')} | {cell(g('tpot50'), '{:.1f}')} | {cell(g('itl99'), '{:.0f}')} | "
                     f"{statistics.median(g('preempt')):.0f} | {rs[0]['cells']} | {sum(g('errors'))} | {len(rs)} |")
open(os.path.join(out, "summary.md"), "w").write("\n".join(lines) + "\n")
print("\n".join(lines))
EOF
