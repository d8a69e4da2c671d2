#!/usr/bin/env python3
"""Speed of each architecture relative to llama, per matmul parameter (docs/MODELS.md).

Runs `ubatch bench` on the tiny reference models (`../shared/reference/models/tiny-<arch>-<type>.gguf`,
random weights, 2-3 layers, n_embd 256, n_vocab 512) in interleaved rounds: every round runs each
architecture once (ppN and tgN, the best of --reps repetitions after the bench's warm-up), in an order that
rotates from round to round, so that a slow spell of a shared machine falls on every architecture
alike. Per architecture and test it prints tokens/s (median, min-max over rounds) and the rate
in matmul parameters per second (tokens/s x the parameters one token multiplies: the layers'
matrices plus the output projection, `layer_matmul_params + output_params` of `bench -o json`)
relative to llama's in the same round: the median and the min-max of that per-round ratio.

Usage: python3 bench/arch_speed.py [--binary build/ubatch] [--models DIR] [--type q4_k_m]
                                   [--rounds 7] [--reps 5] [-p 512] [-n 128] [--threads N]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

ARCHS = ["llama", "llama3", "qwen2", "qwen3", "phi3", "gemma2", "gemma3", "smollm3"]


def bench(binary, model, n_prompt, n_gen, threads, reps):
    cmd = [binary, "bench", "-m", model, "-p", str(n_prompt), "-n", str(n_gen), "-r", str(reps), "--no-roofline",
           "-o", "json"]
    if threads:
        cmd += ["-t", str(threads)]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    doc = json.loads(out)
    m = doc["model"]
    params = m["layer_matmul_params"] + m["output_params"]
    pp = tg = None
    for r in doc["results"]:
        if r.get("batched"):
            continue
        if r["n_prompt"] == n_prompt and r["n_gen"] == 0:
            pp = r["prompt_tps"]["max"]
        if r["n_gen"] == n_gen and r["n_prompt"] == 0:
            tg = r["gen_tps"]["max"]
    if pp is None or tg is None:
        sys.exit(f"no pp{n_prompt}/tg{n_gen} result in the output of {' '.join(cmd)}")
    return params, pp, tg


def spread(xs, fmt):
    return f"{fmt.format(statistics.median(xs))} ({fmt.format(min(xs))}-{fmt.format(max(xs))})"


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    shared = os.environ.get("UBATCH_SHARED_DIR", os.path.join(here, "..", "..", "shared"))
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--binary", default=os.path.join(here, "..", "build", "ubatch"))
    ap.add_argument("--models", default=os.path.join(shared, "reference", "models"))
    ap.add_argument("--type", default="q4_k_m")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("-p", type=int, default=512)
    ap.add_argument("-n", type=int, default=128)
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--reps", type=int, default=5)
    a = ap.parse_args()
    archs = [x for x in ARCHS if os.path.exists(os.path.join(a.models, f"tiny-{x}-{a.type}.gguf"))]
    if "llama" not in archs:
        sys.exit(f"tiny-llama-{a.type}.gguf not found in {a.models}")
    params = {}
    runs = {x: [] for x in archs}  # per round: (pp t/s, tg t/s)
    for r in range(a.rounds):
        order = archs[r % len(archs):] + archs[:r % len(archs)]
        for x in order:
            p, pp, tg = bench(a.binary, os.path.join(a.models, f"tiny-{x}-{a.type}.gguf"), a.p, a.n, a.threads, a.reps)
            params[x] = p
            runs[x].append((pp, tg))
        print(f"round {r + 1}/{a.rounds} done", file=sys.stderr)
    print(f"| architecture ({a.type}) | matmul params / token | pp{a.p} t/s | tg{a.n} t/s "
          f"| pp{a.p} per param vs llama | tg{a.n} per param vs llama |")
    print("|---|---:|---:|---:|---:|---:|")
    for x in archs:
        pp = [v[0] for v in runs[x]]
        tg = [v[1] for v in runs[x]]
        rpp = [runs[x][i][0] * params[x] / (runs["llama"][i][0] * params["llama"]) for i in range(a.rounds)]
        rtg = [runs[x][i][1] * params[x] / (runs["llama"][i][1] * params["llama"]) for i in range(a.rounds)]
        print(f"| {x} | {params[x]:,} | {spread(pp, '{:,.0f}')} | {spread(tg, '{:,.0f}')} "
              f"| {spread(rpp, '{:.2f}')} | {spread(rtg, '{:.2f}')} |")


if __name__ == "__main__":
    main()
