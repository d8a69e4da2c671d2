#!/usr/bin/env python3
"""ubatch against llama.cpp on the same GGUF files and threads, in interleaved rounds.

Each round runs, for every model, both programs one after the other — ubatch first in odd
rounds, llama.cpp first in even ones — so a slow spell of a shared machine falls on both:
  ubatch:    ubatch bench -m M -p P -n N --pp PP --tg TG -B LIST -r R -t T --bw-gbps BW -o json
  llama.cpp: llama-bench -m M -p P -n N -r R -t T -o json
             llama-batched-bench -m M -c CTX -npp PP -ntg TG -npl LIST -t T --output-format jsonl
(llama.cpp is built outside this repository, by the user; --llama-bin names its bin/ folder).
Per model and test it prints tokens/s of both (median and min-max over rounds; within a round
the best of R repetitions, as each tool reports its repetitions' mean or best), the per-round
ratio ubatch / llama.cpp (median, min-max), ubatch's share of its roofline — for generation
the measured read bandwidth (`bench`'s gen_bw_share, counting only touched experts and the
recurrent state), for prompts the measured int8 multiply-accumulate peak (prompt_int8_share) —
and the batched rows' speed-up over one sequence. Prompt rates are tokens/s of prefill; batched
rates are aggregate generated tokens/s over all sequences (llama-batched-bench's S_TG).

Usage: python3 bench/vs_llamacpp.py --llama-bin ~/llama.cpp/build/bin MODEL.gguf [MODEL.gguf ...]
         [--rounds 3] [--reps 2] [--threads 2] [-p 512] [-n 128] [--pp 128] [--tg 128]
         [-B 1,8,32] [--bw-gbps X] [--ubatch build/ubatch] [--ubatch-args "--state-type bf16"]
         [--json OUT.json]
-p 0, -n 0 or -B "" leave those tests out.
"""
import argparse
import json
import os
import shlex
import statistics
import subprocess
import sys


def run(cmd):
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit("failed (%d): %s\n%s" % (p.returncode, " ".join(cmd), p.stderr[-2000:]))
    return p.stdout


def ubatch_round(o, model):
    cmd = [o.ubatch, "bench", "-m", model, "-r", str(o.reps), "-t", str(o.threads), "-o", "json",
           "-p", str(o.p), "-n", str(o.n), "--bw-gbps", str(o.bw_gbps)]
    if o.B:
        cmd += ["--pp", str(o.pp), "--tg", str(o.tg), "-B", o.B]
    cmd += shlex.split(o.ubatch_args)
    doc = json.loads(run(cmd))
    out = {}
    for r in doc["results"]:
        if r["batched"]:
            out["B%d" % r["n_seq"]] = (r["gen_tps"]["max"], r["gen_bw_share"])
        elif r["n_gen"] == 0:
            out["pp%d" % r["n_prompt"]] = (r["prompt_tps"]["max"], r["prompt_int8_share"])
        else:
            out["tg%d" % r["n_gen"]] = (r["gen_tps"]["max"], r["gen_bw_share"])
    return out, cmd


def llama_round(o, model):
    out, cmds = {}, []
    if o.p or o.n:
        cmd = [os.path.join(o.llama_bin, "llama-bench"), "-m", model, "-r", str(o.reps), "-t", str(o.threads),
               "-o", "json"]
        cmd += ["-p", str(o.p)] if o.p else ["-p", "0"]
        cmd += ["-n", str(o.n)] if o.n else ["-n", "0"]
        for r in json.loads(run(cmd)):
            if r["n_prompt"] > 0 and r["n_gen"] == 0:
                out["pp%d" % r["n_prompt"]] = (max(r["samples_ts"]), None)
            elif r["n_gen"] > 0 and r["n_prompt"] == 0:
                out["tg%d" % r["n_gen"]] = (max(r["samples_ts"]), None)
        cmds.append(cmd)
    if o.B:
        npl = [int(x) for x in o.B.split(",")]
        ctx = max(npl) * (o.pp + o.tg) + 256
        cmd = [os.path.join(o.llama_bin, "llama-batched-bench"), "-m", model, "-c", str(ctx), "-b", "2048",
               "-ub", "512", "-npp", str(o.pp), "-ntg", str(o.tg), "-npl", o.B, "-t", str(o.threads),
               "--output-format", "jsonl"]
        best = {}
        for _ in range(o.reps):
            for line in run(cmd).splitlines():
                if line.startswith("{") and '"speed_tg"' in line:
                    r = json.loads(line)
                    best[r["pl"]] = max(best.get(r["pl"], 0.0), r["speed_tg"])
        for pl, v in best.items():
            out["B%d" % pl] = (v, None)
        cmds.append(cmd)
    return out, cmds


def fmt_range(xs, f="%.1f"):
    return (f + " (" + f + "–" + f + ")") % (statistics.median(xs), min(xs), max(xs))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("models", nargs="+")
    ap.add_argument("--llama-bin", required=True, help="folder with llama-bench and llama-batched-bench")
    ap.add_argument("--ubatch", default="build/ubatch")
    ap.add_argument("--ubatch-args", default="", help="more ubatch bench options, one string (e.g. '--state-type bf16')")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("-p", type=int, default=512)
    ap.add_argument("-n", type=int, default=128)
    ap.add_argument("--pp", type=int, default=128)
    ap.add_argument("--tg", type=int, default=128)
    ap.add_argument("-B", default="1,8,32")
    ap.add_argument("--bw-gbps", type=float, default=0.0, help="measured read bandwidth (default: measure once)")
    ap.add_argument("--json", help="write every round's numbers here")
    o = ap.parse_args()
    if o.bw_gbps <= 0:
        doc = json.loads(run([o.ubatch, "bench", "--peaks-only", "-t", str(o.threads), "-o", "json"]))
        o.bw_gbps = doc["machine"]["mem_read_bw"]["gbps"]
    print("read bandwidth %.1f GB/s (the roofline of the shares)" % o.bw_gbps)
    rounds = {m: [] for m in o.models}
    commands = {}
    for rnd in range(o.rounds):
        for model in o.models:
            first_ubatch = rnd % 2 == 0
            res = {}
            for side in (["ubatch", "llama"] if first_ubatch else ["llama", "ubatch"]):
                r, cmd = ubatch_round(o, model) if side == "ubatch" else llama_round(o, model)
                res[side] = r
                commands[(model, side)] = cmd
            rounds[model].append(res)
            print("round %d %s: %s" % (rnd + 1, os.path.basename(model),
                  ", ".join("%s %.1f/%.1f" % (k, res["ubatch"][k][0], res["llama"].get(k, (0,))[0])
                            for k in res["ubatch"])), flush=True)
    for model in o.models:
        print("\n## %s (%d rounds, %d threads)" % (model, o.rounds, o.threads))
        print("ubatch:    " + " ".join(commands[(model, "ubatch")]))
        for c in commands[(model, "llama")]:
            print("llama.cpp: " + " ".join(c))
        print("\n| test | ubatch t/s | llama.cpp t/s | ubatch / llama.cpp | ubatch roofline share | ubatch / B1 |")
        print("|---|---|---|---|---|---|")
        keys = list(rounds[model][0]["ubatch"].keys())
        for k in keys:
            u = [r["ubatch"][k][0] for r in rounds[model]]
            l = [r["llama"][k][0] for r in rounds[model] if k in r["llama"]]
            ratio = [r["ubatch"][k][0] / r["llama"][k][0] for r in rounds[model] if r["llama"].get(k, (0,))[0] > 0]
            share = [r["ubatch"][k][1] for r in rounds[model] if r["ubatch"][k][1]]
            b1 = ""
            if k.startswith("B") and "B1" in rounds[model][0]["ubatch"]:
                b1 = fmt_range([r["ubatch"][k][0] / r["ubatch"]["B1"][0] for r in rounds[model]], "%.2f") + "×"
            print("| %s | %s | %s | %s | %s | %s |" % (
                k, fmt_range(u), fmt_range(l) if l else "—", fmt_range(ratio, "%.2f") + "×" if ratio else "—",
                fmt_range([100 * s for s in share], "%.0f") + "%" if share else "", b1))
    if o.json:
        with open(o.json, "w") as f:
            json.dump({"bw_gbps": o.bw_gbps, "rounds": rounds}, f, indent=1)


if __name__ == "__main__":
    main()
