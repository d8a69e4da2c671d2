#!/usr/bin/env python3
"""Speculative decoding under load: `ubatch load` against two servers, one with speculation
(the defaults, --spec-ngram 4 --spec-k 16) and one without (--spec-k 0), in turn (docs/BENCHMARKS.md).

Starts both servers on the same model (only one is loaded at a time; the idle one sleeps),
then for each user count runs closed-loop `ubatch load` rounds against each in ABBA order,
the same request mix (seed) within a pair, and reports per user count: output tokens/s of
each round, the ratio spec on / spec off per pair (min / median / max), and what speculation
did in the rounds of the speculating server (draft tokens, acceptance, tokens per sequence
step, from its /metrics).

Usage: bench/spec_load.py [--ubatch build/ubatch] [--model PATH] [--users 16,64] [--rounds 2]
       [--duration 15] [--temperature 0] [--ignore-eos] [--serve-arg=ARG ...] [--load-arg=ARG ...]
"""
import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def metrics(base):
    out = {}
    with urllib.request.urlopen(base + "/metrics", timeout=30) as r:
        for line in r.read().decode().splitlines():
            if line and not line.startswith("#"):
                name, value = line.rsplit(" ", 1)
                out[name] = float(value)
    return out


def start(args, extra):
    port = free_port()
    cmd = [args.ubatch, "serve", "--port", str(port), "--log-level", "warn"] + args.serve_arg + extra
    if args.model:
        cmd += ["-m", args.model]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    base = f"http://127.0.0.1:{port}"
    for _ in range(600):
        try:
            with urllib.request.urlopen(base + "/health", timeout=2) as r:
                if r.status == 200:
                    return proc, base, cmd
        except Exception:  # noqa: BLE001 — not up yet
            pass
        time.sleep(0.1)
    proc.kill()
    raise RuntimeError(f"{' '.join(cmd)} did not become healthy")


def run_load(args, base, users, seed, duration, out):
    cmd = [args.ubatch, "load", "--url", base, "--users", str(users), "--duration", str(duration), "--seed", str(seed),
           "--json", out, "-q"] + args.load_arg
    if args.temperature is not None:
        cmd += ["--temperature", str(args.temperature)]
    if args.ignore_eos:
        cmd.append("--ignore-eos")
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    with open(out) as f:
        return json.load(f)["result"], cmd


def spread(values):
    return f"{min(values):.3f} / {statistics.median(values):.3f} / {max(values):.3f}"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ubatch", default="build/ubatch")
    ap.add_argument("--model", default="")
    ap.add_argument("--users", default="16,64")
    ap.add_argument("--rounds", type=int, default=2, help="pairs of rounds per user count")
    ap.add_argument("--duration", type=float, default=15)
    ap.add_argument("--temperature", type=float, default=None)
    ap.add_argument("--ignore-eos", action="store_true")
    ap.add_argument("--serve-arg", action="append", default=[], help="passed to both servers (repeatable)")
    ap.add_argument("--load-arg", action="append", default=[], help="passed to ubatch load (repeatable)")
    args = ap.parse_args()

    on = off = None
    try:
        on, base_on, cmd_on = start(args, [])
        off, base_off, cmd_off = start(args, ["--spec-k", "0"])
        print(f"# spec on:  {' '.join(cmd_on)}")
        print(f"# spec off: {' '.join(cmd_off)}")
        with tempfile.TemporaryDirectory() as tmp:
            for base in (base_on, base_off):  # warm-up: first-touch of weights and KV
                run_load(args, base, 4, 999, 3, os.path.join(tmp, "warm.json"))
            for users in [int(u) for u in args.users.split(",")]:
                ratios, drafts, accepted, tok_step = [], 0.0, 0.0, []
                for i in range(args.rounds):
                    order = [("on", base_on), ("off", base_off)]
                    if i % 2:
                        order.reverse()
                    tps = {}
                    for name, base in order:
                        m0 = metrics(base) if name == "on" else None
                        res, cmd = run_load(args, base, users, i + 1, args.duration,
                                            os.path.join(tmp, f"{users}_{i}_{name}.json"))
                        tps[name] = res["output_tokens_per_s"]
                        if m0 is not None:
                            m1 = metrics(base)
                            d = m1["ubatch_spec_draft_tokens_total"] - m0["ubatch_spec_draft_tokens_total"]
                            a = m1["ubatch_spec_draft_accepted_total"] - m0["ubatch_spec_draft_accepted_total"]
                            steps = (m1["ubatch_sampling_sequence_steps_total"] -
                                     m0["ubatch_sampling_sequence_steps_total"])
                            gen = m1["ubatch_generated_tokens_total"] - m0["ubatch_generated_tokens_total"]
                            drafts += d
                            accepted += a
                            tok_step.append(gen / steps if steps else float("nan"))
                        print(f"users {users} round {i + 1} spec {name}: {tps[name]:.1f} output tok/s, "
                              f"errors {res.get('errors', 0)}", flush=True)
                    ratios.append(tps["on"] / tps["off"])
                print(f"# load: {' '.join(cmd)}")
                print(f"users {users}: output tok/s spec on / off, min / median / max: {spread(ratios)}; "
                      f"draft tokens {drafts:.0f}, acceptance "
                      f"{(100 * accepted / drafts) if drafts else 0:.1f}%, tokens per sequence step "
                      f"{statistics.median(tok_step):.3f}", flush=True)
    finally:
        for p in (on, off):
            if p:
                p.terminate()
                p.wait(timeout=60)
    return 0


if __name__ == "__main__":
    sys.exit(main())
