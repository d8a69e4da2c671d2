#!/usr/bin/env python3
"""What the dashboard's event stream costs the server under load (docs/BENCHMARKS.md).

Starts `ubatch serve` (default model unless --model), then runs closed-loop `ubatch load`
rounds of --users users, alternately without and with --streams readers of
GET /v1/dashboard/events (ABBA order, the same request mix per pair), and reports:

  - stream CPU share: time the server spent on the streams (building each snapshot and its
    JSON, summed over streams, plus the engine thread's time publishing the request table)
    divided by the engine's busy time (time in steps) over the same round;
  - throughput ratio: output tokens/s with the streams / without, per pair;

each as min / median / max over the rounds, plus every round's figures.

Usage: bench/dashboard_overhead.py [--ubatch build/ubatch] [--model PATH] [--users 64]
       [--rounds 3] [--duration 20] [--streams 4] [--interval-ms 250] [--serve-arg=ARG ...]
"""
import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

KEY = "dashboard-overhead"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def metric(base, name):
    req = urllib.request.Request(base + "/metrics", headers={"Authorization": f"Bearer {KEY}"})
    with urllib.request.urlopen(req, timeout=30) as r:
        total, found = 0.0, False
        for line in r.read().decode().splitlines():
            if line.startswith(name + " ") or line.startswith(name + '{model="'):  # summed over models
                total += float(line.split()[-1])
                found = True
    if not found:
        raise RuntimeError(f"{name} not in /metrics")
    return total


class Reader(threading.Thread):
    """Reads the event stream, keeping the first and last snapshots."""

    def __init__(self, base, interval_ms):
        super().__init__(daemon=True)
        self.url = f"{base}/v1/dashboard/events?interval_ms={interval_ms}"
        self.first = self.last = None
        self.events = 0
        self.stop = False
        self.error = None

    def run(self):
        try:
            req = urllib.request.Request(self.url, headers={"Authorization": f"Bearer {KEY}"})
            with urllib.request.urlopen(req, timeout=60) as r:
                data = []
                for raw in r:
                    line = raw.decode().rstrip("\r\n")
                    if line.startswith("data: "):
                        data.append(line[6:])
                    elif line == "" and data:
                        snap = json.loads("\n".join(data))
                        data = []
                        self.first = self.first or snap
                        self.last = snap
                        self.events += 1
                    if self.stop:
                        break
        except Exception as e:  # noqa: BLE001 — reported by the caller
            self.error = e


def run_load(args, base, seed, out):
    subprocess.run([args.ubatch, "load", "--url", base, "--api-key", KEY, "--users", str(args.users),
                    "--duration", str(args.duration), "--seed", str(seed), "--json", out, "-q"],
                   check=True, stdout=subprocess.DEVNULL)
    with open(out) as f:
        return json.load(f)["result"]["output_tokens_per_s"]


def one_round(args, base, seed, streams, tmp):
    busy0 = metric(base, "ubatch_busy_seconds_total") * 1000.0
    readers = [Reader(base, args.interval_ms) for _ in range(streams)]
    for r in readers:
        r.start()
    if streams:
        end = time.monotonic() + 30
        while any(r.first is None and r.error is None for r in readers) and time.monotonic() < end:
            time.sleep(0.05)
    tps = run_load(args, base, seed, os.path.join(tmp, f"load_{seed}_{streams}.json"))
    busy1 = metric(base, "ubatch_busy_seconds_total") * 1000.0
    row = {"streams": streams, "tps": tps, "busy_ms": busy1 - busy0, "cost_ms": 0.0, "events": 0}
    if streams:
        time.sleep(args.interval_ms / 1000.0 * 2)
        for r in readers:
            r.stop = True
        for r in readers:
            if r.error or r.last is None:
                raise RuntimeError(f"a dashboard stream failed: {r.error}")
            row["cost_ms"] += r.last["feed"]["build_ms"] - r.first["feed"]["build_ms"]
            row["events"] += r.last["feed"]["events"] - r.first["feed"]["events"]
        row["engine_ms"] = readers[0].last["engine"]["live_view_ms"] - readers[0].first["engine"]["live_view_ms"]
        row["cost_ms"] += row["engine_ms"]
        row["share"] = row["cost_ms"] / row["busy_ms"] if row["busy_ms"] > 0 else float("nan")
    return row


def spread(values):
    return f"min {min(values):.4g}, median {statistics.median(values):.4g}, max {max(values):.4g}"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ubatch", default="build/ubatch")
    ap.add_argument("--model", default="")
    ap.add_argument("--users", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=3, help="pairs of rounds (without, with)")
    ap.add_argument("--duration", type=float, default=20)
    ap.add_argument("--streams", type=int, default=4)
    ap.add_argument("--interval-ms", type=int, default=250)
    ap.add_argument("--serve-arg", action="append", default=[], help="passed to ubatch serve (repeatable)")
    args = ap.parse_args()

    port = free_port()
    base = f"http://127.0.0.1:{port}"
    cmd = [args.ubatch, "serve", "--port", str(port), "--api-key", KEY, "--log-level", "warn"] + args.serve_arg
    if args.model:
        cmd += ["-m", args.model]
    server = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(600):
            try:
                with urllib.request.urlopen(base + "/health", timeout=2) as r:
                    if r.status == 200:
                        break
            except Exception:  # noqa: BLE001 — not up yet
                pass
            time.sleep(0.1)
        print(f"# {' '.join(cmd)}")
        print(f"# load: {args.users} users, {args.duration} s per round; streams: {args.streams} at "
              f"{args.interval_ms} ms; {args.rounds} pairs, ABBA order")
        with tempfile.TemporaryDirectory() as tmp:
            run_load(argparse.Namespace(**{**vars(args), "duration": 5}), base, 999, os.path.join(tmp, "warm.json"))
            rows = []
            for i in range(args.rounds):
                order = [0, args.streams] if i % 2 == 0 else [args.streams, 0]
                pair = {}
                for streams in order:
                    row = one_round(args, base, seed=i + 1, streams=streams, tmp=tmp)
                    pair[streams] = row
                    print(f"round {i + 1} streams {streams}: {row['tps']:.1f} output tok/s, engine busy "
                          f"{row['busy_ms'] / 1000:.1f} s" +
                          (f", stream cost {row['cost_ms']:.1f} ms over {row['events']} snapshots (engine thread "
                           f"{row['engine_ms']:.2f} ms) = {100 * row['share']:.3f}% of engine time" if streams else ""),
                          flush=True)
                rows.append(pair)
        shares = [100 * p[args.streams]["share"] for p in rows]
        ratios = [p[args.streams]["tps"] / p[0]["tps"] for p in rows]
        per_snapshot = [p[args.streams]["cost_ms"] / max(1, p[args.streams]["events"]) for p in rows]
        print(f"stream cost, % of engine time: {spread(shares)}")
        print(f"cost per snapshot, ms: {spread(per_snapshot)}")
        print(f"output tok/s with / without streams: {spread(ratios)}")
    finally:
        server.terminate()
        server.wait(timeout=60)
    return 0


if __name__ == "__main__":
    sys.exit(main())
