#!/usr/bin/env python3
"""`ubatch load` against replicas behind HAProxy (scripts/cluster.sh), in interleaved rounds.

Two experiments (docs/DEPLOY.md, docs/BENCHMARKS.md "Replicas behind HAProxy"):

  replicas  throughput with 1, 2 and 3 replicas behind the balancer (and 1 replica without it,
            for the balancer's own cost): a closed loop of --users users, synthetic prompts,
            fixed-length answers. Besides wall-clock rates it reads the CPU time the replicas
            and HAProxy used (/proc/PID/stat): output tokens per replica CPU-second (their
            efficiency, whatever else runs on the machine), the cores the replicas actually got
            (CPU-s / wall-s), and HAProxy's CPU-ms per request.
  affinity  the prefix-cache hit rate with prefix affinity on (consistent hashing on the
            prompt's first bytes, bounded loads; `unbounded`: without the bound) vs off (least
            connections), for a workload of 8 shared
            system prompts (`ubatch load --shared-prefixes 8`). Hit rate = cached prompt tokens /
            all prompt tokens, summed over the replicas' /metrics (fresh replicas every run).

Every configuration runs once per round, rounds interleaved (round 1 of every configuration,
then round 2, …), so a busy minute on a shared machine hits all alike; the table gives the
median and the min..max over rounds, and `uptime`'s load average at each run.

Usage: scripts/bench/cluster_load.py replicas|affinity [--rounds 3] [--out bench-results/cluster]
       [--model PATH] [--users N] [--duration S] [--requests N] [--n-ctx C] [--n-parallel P]
       [--replicas N (affinity)] [--prefix-tokens W] [--configs on,unbounded,off]
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CLUSTER = os.path.join(ROOT, "scripts", "cluster.sh")


def load_average():
    return open("/proc/loadavg").read().split()[0]


def metrics(port):
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    out = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, value = line.rsplit(" ", 1)
            # Engine series carry a model label: sum them over the models served.
            name = re.sub(r'model="[^"]*",?', "", name).replace("{}", "")
            out[name] = out.get(name, 0.0) + float(value)
    return out


def start(args, run_dir, replicas, affinity, n_parallel, n_ctx, balance_factor=150):
    cmd = [CLUSTER, "start", "--replicas", str(replicas), "--model", args.model, "--ubatch", args.ubatch,
           "--threads", "1", "--n-parallel", str(n_parallel), "--n-ctx", str(n_ctx), "--affinity", affinity,
           "--balance-factor", str(balance_factor),
           "--port", "0", "--stats-port", "0", "--replica-port", "0", "--run-dir", run_dir]
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    env = dict(line.split("=", 1) for line in open(os.path.join(run_dir, "cluster.env")).read().split())
    ports = [int(open(os.path.join(run_dir, f"replica-{i}.port")).read()) for i in range(1, replicas + 1)]
    return int(env["LB_PORT"]), ports


def cpu_seconds(pid):
    """User + system CPU time of a process so far (/proc/PID/stat fields 14 and 15)."""
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def cluster_pids(run_dir, replicas):
    replica = [int(open(os.path.join(run_dir, f"replica-{i}.pid")).read()) for i in range(1, replicas + 1)]
    return replica, int(open(os.path.join(run_dir, "haproxy.pid")).read())


def stop(run_dir):
    subprocess.run([CLUSTER, "stop", "--run-dir", run_dir], check=False, stdout=subprocess.DEVNULL)


def run_load(args, url, load_args, json_path):
    cmd = [args.ubatch, "load", "--url", url, "-q", "--json", json_path, "--temperature", "0", *load_args]
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    return json.load(open(json_path))["result"]


def summary(values):
    return statistics.median(values), min(values), max(values)


def fmt(values, spec=".1f"):
    med, lo, hi = summary(values)
    return f"{med:{spec}} ({lo:{spec}}–{hi:{spec}})"


def experiment_replicas(args):
    configs = [("1 replica, direct", 1, False), ("1 replica", 1, True), ("2 replicas", 2, True), ("3 replicas", 3, True)]
    load_args = ["--users", str(args.users), "--duration", str(args.duration), "--prompt-tokens", "32:128",
                 "--max-tokens", "64:64", "--ignore-eos"]
    results = {name: [] for name, _, _ in configs}
    for rnd in range(1, args.rounds + 1):
        for name, n, balanced in configs:
            run_dir = os.path.join(args.out, "run")
            try:
                lb_port, ports = start(args, run_dir, n, "on", args.n_parallel, args.n_ctx)
                url = f"http://127.0.0.1:{lb_port if balanced else ports[0]}"
                la = load_average()
                replica_pids, haproxy_pid = cluster_pids(run_dir, n)
                cpu0 = [cpu_seconds(p) for p in replica_pids], cpu_seconds(haproxy_pid)
                r = run_load(args, url, load_args, os.path.join(args.out, f"replicas-{n}{'' if balanced else '-direct'}-r{rnd}.json"))
                cpu1 = [cpu_seconds(p) for p in replica_pids], cpu_seconds(haproxy_pid)
            finally:
                stop(run_dir)
            replica_cpu = sum(cpu1[0]) - sum(cpu0[0])
            x = {"output_tps": r["output_tokens_per_s"], "request_rate": r["request_rate"], "ttft_p50": r["ttft_ms"]["p50"],
                 "errors": r["errors"], "load": la, "output_tokens": r["output_tokens"], "wall_s": r["wall_s"],
                 "replica_cpu_s": replica_cpu, "haproxy_cpu_s": cpu1[1] - cpu0[1], "completed": r["completed"]}
            x["tokens_per_cpu_s"] = x["output_tokens"] / replica_cpu
            x["cores"] = replica_cpu / x["wall_s"]
            x["haproxy_ms_per_request"] = 1000 * x["haproxy_cpu_s"] / max(1, x["completed"]) if balanced else 0.0
            results[name].append(x)
            print(f"round {rnd} {name:18} {x['output_tps']:7.1f} output tok/s  {x['request_rate']:5.2f} req/s  "
                  f"TTFT p50 {x['ttft_p50']:7.1f} ms  {x['tokens_per_cpu_s']:6.1f} tok/replica-CPU-s  "
                  f"replicas got {x['cores']:.2f} cores  HAProxy {x['haproxy_ms_per_request']:.2f} CPU-ms/request  "
                  f"errors {x['errors']}  load avg {la}", flush=True)
    base = [x["output_tps"] for x in results["1 replica"]]
    print(f"\n| configuration | output tok/s | × 1 replica | output tok per replica CPU-s | cores the replicas got | "
          f"HAProxy CPU-ms/request | TTFT p50 ms | errors | load avg |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |")
    for name, _, _ in configs:
        xs = results[name]
        ratio = [x["output_tps"] / b for x, b in zip(xs, base)]
        print(f"| {name} | {fmt([x['output_tps'] for x in xs])} | {fmt(ratio, '.2f')} | "
              f"{fmt([x['tokens_per_cpu_s'] for x in xs])} | {fmt([x['cores'] for x in xs], '.2f')} | "
              f"{fmt([x['haproxy_ms_per_request'] for x in xs], '.2f')} | {fmt([x['ttft_p50'] for x in xs], '.0f')} | "
              f"{sum(x['errors'] for x in xs)} | {', '.join(x['load'] for x in xs)} |")
    return results


def experiment_affinity(args):
    load_args = ["--users", str(args.users), "--requests", str(args.requests), "--shared-prefixes", "8",
                 "--prefix-tokens", str(args.prefix_tokens), "--prompt-tokens", "16:64", "--max-tokens", "16:32",
                 "--ignore-eos"]
    # on: consistent hashing with bounded loads (hash-balance-factor 150, the shipped config);
    # unbounded: the same without the bound (factor 0); off: least connections.
    configs = args.configs.split(",")
    results = {c: [] for c in configs}
    for rnd in range(1, args.rounds + 1):
        for affinity in configs:
            run_dir = os.path.join(args.out, "run")
            try:
                lb_port, ports = start(args, run_dir, args.replicas, "off" if affinity == "off" else "on", args.n_parallel,
                                       args.n_ctx, 0 if affinity == "unbounded" else 150)
                la = load_average()
                r = run_load(args, f"http://127.0.0.1:{lb_port}", load_args,
                             os.path.join(args.out, f"affinity-{affinity}-r{rnd}.json"))
                ms = [metrics(p) for p in ports]
            finally:
                stop(run_dir)
            prefilled = sum(m["ubatch_prompt_tokens_total"] for m in ms)
            cached = sum(m["ubatch_cached_prompt_tokens_total"] for m in ms)
            share = [int(m["ubatch_requests_finished_total"]) for m in ms]
            hit = cached / (prefilled + cached)
            results[affinity].append({"hit_rate": hit, "output_tps": r["output_tokens_per_s"],
                                      "ttft_p50": r["ttft_ms"]["p50"], "errors": r["errors"], "requests": share,
                                      "prefilled": prefilled, "load": la})
            print(f"round {rnd} affinity {affinity:9}  hit rate {100 * hit:5.1f}%  prefilled {int(prefilled):7d} tokens  "
                  f"{r['output_tokens_per_s']:6.1f} output tok/s  TTFT p50 {r['ttft_ms']['p50']:7.1f} ms  "
                  f"requests per replica {share}  errors {r['errors']}  load avg {la}", flush=True)
    print(f"\n| affinity | prefix-cache hit rate % | prompt tokens prefilled | output tok/s | TTFT p50 ms | "
          f"requests per replica (round 1) | errors | load avg |")
    print("| --- | ---: | ---: | ---: | ---: | --- | ---: | --- |")
    for affinity in configs:
        xs = results[affinity]
        print(f"| {affinity} | {fmt([100 * x['hit_rate'] for x in xs])} | {fmt([x['prefilled'] for x in xs], '.0f')} | "
              f"{fmt([x['output_tps'] for x in xs])} | {fmt([x['ttft_p50'] for x in xs], '.0f')} | {xs[0]['requests']} | "
              f"{sum(x['errors'] for x in xs)} | {', '.join(x['load'] for x in xs)} |")
    return results


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("experiment", choices=("replicas", "affinity"))
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--out", default=os.path.join(ROOT, "bench-results", "cluster"))
    ap.add_argument("--ubatch", default=os.path.join(ROOT, "build", "ubatch"))
    ap.add_argument("--model", default=os.path.join(ROOT, "models", "gemma-3-270m-q4_k_m.gguf"))
    ap.add_argument("--users", type=int, default=None, help="replicas: 16, affinity: 12")
    ap.add_argument("--duration", type=float, default=30, help="replicas: seconds of load per run")
    ap.add_argument("--requests", type=int, default=240, help="affinity: requests per run")
    ap.add_argument("--n-parallel", type=int, default=None, help="per replica; replicas: 8, affinity: 4")
    ap.add_argument("--n-ctx", type=int, default=0, help="KV cells per replica (0: serve's default)")
    ap.add_argument("--replicas", type=int, default=3, help="affinity: replicas")
    ap.add_argument("--prefix-tokens", type=int, default=384, help="affinity: words per shared prefix")
    ap.add_argument("--configs", default="on,off", help="affinity: among on, unbounded, off")
    args = ap.parse_args()
    args.users = args.users or (16 if args.experiment == "replicas" else 12)
    args.n_parallel = args.n_parallel or (8 if args.experiment == "replicas" else 4)
    os.makedirs(args.out, exist_ok=True)
    print(f"{time.strftime('%Y-%m-%d %H:%M')}  {os.cpu_count()} CPUs  load average {load_average()}  "
          f"args {vars(args)}", flush=True)
    results = experiment_replicas(args) if args.experiment == "replicas" else experiment_affinity(args)
    json.dump({"args": vars(args), "results": results},
              open(os.path.join(args.out, f"{args.experiment}-summary.json"), "w"), indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
