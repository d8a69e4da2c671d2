#!/usr/bin/env python3
"""/health latency and completions while hostile clients hold connections open.

Against a running `ubatch serve` (or any HTTP server with /health): in each round, first
quiet (no other client), then under attack — IDLE connections that connect and send
nothing and LORIS "slow-loris" connections that send a request header one byte per
second and never finish it. Connections the server closes (its idle and header timeouts)
are reopened at once, so the attack stays at full strength. In both phases a probe thread
measures /health (a fresh connection each time: connect, request, whole response) and
sends one small completion. Rounds interleave quiet and attack phases so that both see the
same machine load; the summary gives min / median / p99 / max per phase.

  build/ubatch serve --port 8080 &
  python3 bench/hostile_clients.py --url http://127.0.0.1:8080 --idle 2000 --loris 200

Only the standard library; raises its own open-file limit for the attack sockets.
"""
import argparse
import asyncio
import json
import resource
import socket
import statistics
import sys
import threading
import time
import urllib.parse


def parse_url(url):
    u = urllib.parse.urlparse(url)
    if u.scheme != "http" or not u.hostname:
        sys.exit(f"--url: expected http://HOST[:PORT], got {url}")
    return u.hostname, u.port or 80


def http_once(host, port, method, path, body=None, timeout=10.0):
    """One request on a fresh connection. Returns (status, seconds) or (None, seconds)."""
    t0 = time.perf_counter()
    try:
        with socket.create_connection((host, port), timeout=timeout) as s:
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            data = body.encode() if body else b""
            head = f"{method} {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n"
            if body is not None:
                head += f"Content-Type: application/json\r\nContent-Length: {len(data)}\r\n"
            s.sendall(head.encode() + b"\r\n" + data)
            got = b""
            while True:
                chunk = s.recv(65536)
                if not chunk:
                    break
                got += chunk
        status = int(got.split(b" ", 2)[1]) if got.startswith(b"HTTP/1.") else None
        return status, time.perf_counter() - t0
    except OSError:
        return None, time.perf_counter() - t0


class Attack:
    """IDLE silent connections and LORIS one-byte-a-second headers, reopened when closed."""

    def __init__(self, host, port, idle, loris):
        self.host, self.port, self.idle, self.loris = host, port, idle, loris
        self.open_now = 0
        self.reopened = 0
        self.failed = 0
        self.stop = None
        self.ready = threading.Event()
        self.loop = None

    async def one(self, kind, i):
        first = True
        while not self.stop.is_set():
            try:
                reader, writer = await asyncio.open_connection(self.host, self.port)
            except OSError:
                self.failed += 1
                await asyncio.sleep(0.5)
                continue
            if not first:
                self.reopened += 1
            first = False
            self.open_now += 1
            try:
                if kind == "loris":
                    writer.write(f"GET /health HTTP/1.1\r\nHost: x\r\nX-Loris-{i}: ".encode())
                    await writer.drain()
                while not self.stop.is_set():
                    if kind == "loris":
                        writer.write(b"a")
                        await writer.drain()
                    try:
                        # Wakes on the server's close (or any byte it sends), else each second.
                        data = await asyncio.wait_for(reader.read(4096), timeout=1.0)
                        if not data:
                            break
                    except asyncio.TimeoutError:
                        pass
            except (OSError, ConnectionError):
                pass
            finally:
                self.open_now -= 1
                writer.close()

    async def main(self):
        self.stop = asyncio.Event()
        self.loop = asyncio.get_running_loop()
        tasks = []
        for i in range(self.idle):
            tasks.append(asyncio.create_task(self.one("idle", i)))
            if i % 100 == 99:
                await asyncio.sleep(0.01)  # do not overflow the listen backlog
        for i in range(self.loris):
            tasks.append(asyncio.create_task(self.one("loris", i)))
        t0 = time.monotonic()
        while self.open_now < self.idle + self.loris and time.monotonic() - t0 < 30:
            await asyncio.sleep(0.05)
        self.ready.set()
        await self.stop.wait()
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    def run_in_thread(self):
        th = threading.Thread(target=lambda: asyncio.run(self.main()), daemon=True)
        th.start()
        return th

    def end(self):
        self.loop.call_soon_threadsafe(self.stop.set)


def probe(host, port, n, completion_body):
    lat, bad = [], 0
    for _ in range(n):
        status, dt = http_once(host, port, "GET", "/health")
        if status == 200:
            lat.append(dt * 1000)
        else:
            bad += 1
    status, dt = http_once(host, port, "POST", "/v1/completions", completion_body, timeout=120)
    return lat, bad, status, dt * 1000


def summary(ms):
    if not ms:
        return "no answer"
    s = sorted(ms)
    p99 = s[min(len(s) - 1, int(round(0.99 * (len(s) - 1))))]
    return f"min {s[0]:.2f}  median {statistics.median(s):.2f}  p99 {p99:.2f}  max {s[-1]:.2f} ms"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--url", default="http://127.0.0.1:8080")
    ap.add_argument("--idle", type=int, default=2000, help="silent connections")
    ap.add_argument("--loris", type=int, default=200, help="slow-loris connections")
    ap.add_argument("--probes", type=int, default=100, help="/health requests per phase")
    ap.add_argument("--rounds", type=int, default=3, help="quiet + attack rounds, interleaved")
    ap.add_argument("--hold", type=float, default=8.0,
                    help="seconds the attack runs before probing (past the server's idle timeout, "
                         "so that reopened connections are part of it)")
    ap.add_argument("--json", help="write the raw numbers here")
    args = ap.parse_args()
    host, port = parse_url(args.url)
    need = args.idle + args.loris + 64
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < need:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, max(need, soft)), hard))
        if resource.getrlimit(resource.RLIMIT_NOFILE)[0] < need:
            sys.exit(f"open-file limit {hard} is below the {need} sockets needed")
    body = json.dumps({"prompt": "The capital of France is", "max_tokens": 8, "temperature": 0})
    results = {"quiet": [], "attack": []}
    completions = {"quiet": [], "attack": []}
    bad = {"quiet": 0, "attack": 0}
    attack_stats = []
    for r in range(args.rounds):
        lat, b, st, cms = probe(host, port, args.probes, body)
        results["quiet"] += lat
        bad["quiet"] += b
        completions["quiet"].append((st, cms))
        a = Attack(host, port, args.idle, args.loris)
        th = a.run_in_thread()
        a.ready.wait(60)
        opened = a.open_now
        time.sleep(args.hold)
        lat, b, st, cms = probe(host, port, args.probes, body)
        results["attack"] += lat
        bad["attack"] += b
        completions["attack"].append((st, cms))
        attack_stats.append({"open_at_start": opened, "open_at_probe_end": a.open_now,
                             "reopened": a.reopened, "connect_failures": a.failed})
        a.end()
        th.join(30)
        print(f"round {r + 1}: quiet and attack done; attack connections open {opened} at start, "
              f"{a.reopened} reopened after the server closed them, {a.failed} connects failed", flush=True)
    for phase in ("quiet", "attack"):
        print(f"{phase:7s} /health ({len(results[phase])} ok, {bad[phase]} failed): {summary(results[phase])}")
        print(f"{phase:7s} completion: " + ", ".join(f"{s} in {ms:.0f} ms" for s, ms in completions[phase]))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"args": vars(args), "health_ms": results, "health_failed": bad,
                       "completions": completions, "attack": attack_stats}, f, indent=1)


if __name__ == "__main__":
    main()
