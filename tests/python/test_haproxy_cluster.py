#!/usr/bin/env python3
"""Replicas of `ubatch serve` behind HAProxy, started by scripts/cluster.sh with
deploy/haproxy/haproxy.cfg, as users run them (docs/DEPLOY.md).

Scenarios (--scenario):
  affinity  2 replicas of a tiny reference model. Requests with 4 shared prefixes (2 completion
            prompts, 2 chat system prompts): each prefix is served by one replica, with
            cached prompt tokens from its second request on. Then, under load, one replica is
            killed (SIGKILL): every request in flight ends (answered, or a clean error — never a
            hang), requests sent after the kill are all answered (refused connections are
            retried on the other replica), prefixes of the surviving replica stay there, and the
            balancer marks the dead one DOWN.
  failover  2 replicas of the default model (slow enough that requests are surely in flight).
            Saturation: with a replica's slots and queue filled directly, its /health says 503
            "saturated", a request for its prefix is refused there and replayed on the other
            replica, the balancer takes it out and brings it back (with its keys) once it has
            room. Then a replica is killed while two streams and one non-streaming request run on it. The
            streams end at once with a cut stream (no [DONE]), the non-streaming request — no
            byte of it answered yet — is replayed on the other replica and answered 200.
  drain     2 replicas of the default model, when `ubatch serve` drains on SIGTERM
            (--shutdown-timeout): a replica gets SIGTERM with two streams running on it; both
            finish with [DONE], it exits 0, and requests sent meanwhile are answered by the other.

Exit status: 0 passed, 1 failed, 77 skipped (the reason printed: no haproxy, no model, no
binary, or a server without SIGTERM draining). Every process started is stopped at the end.
"""
import argparse
import csv
import http.client
import io
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time

SKIP = 77
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CLUSTER = os.path.join(ROOT, "scripts", "cluster.sh")


class Failure(Exception):
    pass


def check(cond, message):
    if not cond:
        raise Failure(message)


def log(message):
    print(message, flush=True)


# --- HTTP ------------------------------------------------------------------------------------

def post(port, path, body, timeout=120):
    """POST JSON; returns (status, headers dict lower-case, parsed body or text). status 0: no answer."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
        r = conn.getresponse()
        data = r.read()
        headers = {k.lower(): v for k, v in r.getheaders()}
        try:
            return r.status, headers, json.loads(data)
        except ValueError:
            return r.status, headers, data.decode("utf-8", "replace")
    except (OSError, http.client.HTTPException) as e:
        return 0, {}, f"{type(e).__name__}: {e}"
    finally:
        conn.close()


def get(port, path, timeout=10):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.request("GET", path)
        r = conn.getresponse()
        return r.status, r.read().decode("utf-8", "replace")
    except (OSError, http.client.HTTPException) as e:
        return 0, str(e)
    finally:
        conn.close()


class Stream:
    """A streaming request read frame by frame. outcome: 'done' ([DONE] seen), 'cut' (the
    connection ended without [DONE]), 'http_<status>' (refused), 'error' (no answer)."""

    def __init__(self, port, path, body, timeout=120):
        self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
        self.frames = 0
        self.outcome = None
        self.served_by = None
        self.ended_at = None
        body = dict(body, stream=True)
        try:
            self.conn.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
            self.resp = self.conn.getresponse()
            self.served_by = self.resp.getheader("X-Served-By")
            if self.resp.status != 200:
                self.resp.read()
                self._end(f"http_{self.resp.status}")
        except (OSError, http.client.HTTPException):
            self._end("error")

    def _end(self, outcome):
        self.outcome = outcome
        self.ended_at = time.monotonic()
        self.conn.close()

    def read_frames(self, n):
        """Reads until n more data frames arrived or the stream ended."""
        target = self.frames + n
        while self.outcome is None and self.frames < target:
            try:
                line = self.resp.readline()
            except (OSError, http.client.HTTPException):
                line = b""
            if not line:
                self._end("cut")
            elif line.startswith(b"data: "):
                if line.strip() == b"data: [DONE]":
                    self._end("done")
                else:
                    self.frames += 1

    def read_all(self):
        while self.outcome is None:
            self.read_frames(1 << 30)
        return self.outcome


def stats_rows(stats_port):
    status, text = get(stats_port, "/stats;csv")
    check(status == 200, f"stats page answered {status}")
    rows = csv.DictReader(io.StringIO(text.lstrip("# ")))
    return {r["svname"]: r for r in rows if r["pxname"] == "ubatch_replicas"}


# --- the cluster -----------------------------------------------------------------------------

class Cluster:
    def __init__(self, ubatch, model, run_dir, replicas=2, n_parallel=2, n_ctx=4096, extra=()):
        self.run_dir = run_dir
        cmd = [CLUSTER, "start", "--replicas", str(replicas), "--model", model, "--ubatch", ubatch,
               "--port", "0", "--stats-port", "0", "--replica-port", "0", "--threads", "1",
               "--n-parallel", str(n_parallel), "--n-ctx", str(n_ctx), "--run-dir", run_dir, "--grace", "30"]
        if extra:
            cmd += ["--", *extra]
        started = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
        log(started.stdout.rstrip())
        if started.returncode != 0:
            raise Failure(f"cluster.sh start failed ({started.returncode}):\n{started.stderr}")
        env = dict(line.split("=", 1) for line in open(os.path.join(run_dir, "cluster.env")).read().split())
        self.port = int(env["LB_PORT"])
        self.stats_port = int(env["STATS_PORT"])
        self.replicas = int(env["REPLICAS"])

    def replica_port(self, name):
        return int(open(os.path.join(self.run_dir, f"replica-{name[1:]}.port")).read())

    def replica_pid(self, name):
        return int(open(os.path.join(self.run_dir, f"replica-{name[1:]}.pid")).read())

    def signal(self, name, sig):
        r = subprocess.run([CLUSTER, "signal", name[1:], sig, "--run-dir", self.run_dir],
                           capture_output=True, text=True, timeout=30)
        check(r.returncode == 0, f"cluster.sh signal failed: {r.stderr}")

    def wait_status(self, name, status, timeout_s=60):
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if stats_rows(self.stats_port)[name]["status"] == status:
                return True
            time.sleep(0.2)
        return False

    def stop(self):
        subprocess.run([CLUSTER, "stop", "--run-dir", self.run_dir, "--grace", "30"],
                       capture_output=True, text=True, timeout=300)

    def dump_logs(self):
        for f in sorted(os.listdir(self.run_dir)):
            if f.endswith(".log"):
                text = open(os.path.join(self.run_dir, f), errors="replace").read()
                log(f"--- {f} (last 3000 bytes)\n{text[-3000:]}")


def prefix_text(tag):
    # ~400 bytes, well past the 256 bytes the balancer hashes, shared by every request of the tag.
    return (f"Instructions {tag}: you are a careful assistant for team {tag}; answer in short sentences, "
            "cite nothing you cannot check, and keep every reply polite and brief. ") * 3


def prefixed_request(i, round_):
    """Prefix i (0..3): 0 and 1 as completion prompts, 2 and 3 as chat system prompts."""
    tag = "ABCD"[i]
    if i < 2:
        return "/v1/completions", {"prompt": prefix_text(tag) + f" Question {round_}: what comes next?",
                                   "max_tokens": 4, "temperature": 0}
    return "/v1/chat/completions", {"messages": [{"role": "system", "content": prefix_text(tag)},
                                                 {"role": "user", "content": f"Question {round_}: what comes next?"}],
                                    "max_tokens": 4, "temperature": 0}


def cached_tokens(body):
    return body["usage"].get("prompt_tokens_details", {}).get("cached_tokens", 0)


# --- scenarios -------------------------------------------------------------------------------

def scenario_affinity(args, run_dir):
    model = os.path.join(args.shared, "reference", "models", "tiny-llama-q8_0.gguf")
    if not os.path.exists(model):
        return skip(f"tiny reference model not found at {model}")
    cluster = Cluster(args.ubatch, model, run_dir, n_parallel=4)
    try:
        # 1. Four shared prefixes, four requests each, interleaved: one replica per prefix.
        served = {i: [] for i in range(4)}
        for round_ in range(4):
            for i in range(4):
                path, body = prefixed_request(i, round_)
                status, headers, reply = post(cluster.port, path, body)
                check(status == 200, f"prefix {i} round {round_}: {status} {reply}")
                served[i].append((headers.get("x-served-by"), cached_tokens(reply), reply["usage"]["prompt_tokens"]))
        for i in range(4):
            log(f"prefix {'ABCD'[i]}: (replica, cached, prompt tokens) {served[i]}")
            replicas = {r for r, _, _ in served[i]}
            check(len(replicas) == 1 and None not in replicas, f"prefix {i} served by {replicas}")
            for round_, (_, cached, prompt) in enumerate(served[i][1:], start=1):
                check(cached > 0, f"prefix {i} round {round_}: no cached prompt tokens ({served[i]})")
                check(cached <= prompt, f"cached {cached} > prompt {prompt}")
        home = {i: served[i][0][0] for i in range(4)}
        log(f"replica per prefix: {home}")

        # 2. Under load (4 users, mixed streaming and not), kill the replica of prefix A.
        victim = home[0]
        survivor = "r2" if victim == "r1" else "r1"
        stop_load = threading.Event()
        outcomes, lock = [], threading.Lock()

        def user(u):
            n = 0
            while not stop_load.is_set():
                path, body = prefixed_request(u % 4, 100 + n)
                body = dict(body, max_tokens=64, ignore_eos=True)
                t0 = time.monotonic()
                if n % 2:
                    s = Stream(cluster.port, path, body, timeout=60)
                    outcome = s.read_all()
                else:
                    status, _, reply = post(cluster.port, path, body, timeout=60)
                    outcome = "ok" if status == 200 else f"http_{status}: {str(reply)[:200]}"
                with lock:
                    outcomes.append((outcome, time.monotonic() - t0))
                n += 1

        threads = [threading.Thread(target=user, args=(u,), daemon=True) for u in range(4)]
        for t in threads:
            t.start()
        time.sleep(1.0)
        cluster.signal(victim, "KILL")
        log(f"killed {victim} (SIGKILL) under load")
        time.sleep(1.0)
        stop_load.set()
        for t in threads:
            t.join(timeout=90)
            check(not t.is_alive(), "a client is still waiting 90 s after the load stopped: a request hangs")
        kinds = {}
        for outcome, _ in outcomes:
            kind = outcome.split(":")[0]
            kinds[kind] = kinds.get(kind, 0) + 1
        log(f"requests around the kill: {kinds}; slowest {max(d for _, d in outcomes):.2f} s")
        check(kinds.get("ok", 0) + kinds.get("done", 0) > 0, "nothing was answered under load")
        for outcome, _ in outcomes:
            # A request either answered, or ended cleanly: a cut stream, or an error from the balancer.
            check(outcome in ("ok", "done", "cut") or outcome.startswith("http_50"), f"unexpected outcome {outcome}")

        # 3. Right after the kill every prefix is answered: refused connections are retried on
        # the survivor; prefixes that lived there keep their replica and their cache.
        for i in range(4):
            path, body = prefixed_request(i, 200)
            status, headers, reply = post(cluster.port, path, body)
            check(status == 200, f"after the kill, prefix {i}: {status} {reply}")
            check(headers.get("x-served-by") == survivor, f"prefix {i} served by {headers.get('x-served-by')}")
            if home[i] == survivor:
                check(cached_tokens(reply) > 0, f"prefix {i} lost its cache on {survivor}: {reply['usage']}")
        check(cluster.wait_status(victim, "DOWN"), f"{victim} not marked DOWN")
        rows = stats_rows(cluster.stats_port)
        log(f"stats: {victim} {rows[victim]['status']}, {survivor} {rows[survivor]['status']}, "
            f"redispatches {rows['BACKEND']['wredis']}, retries {rows['BACKEND']['wretr']}")
        # Moved prefixes now hit the survivor's cache too.
        for i in range(4):
            path, body = prefixed_request(i, 201)
            status, headers, reply = post(cluster.port, path, body)
            check(status == 200 and headers.get("x-served-by") == survivor, f"prefix {i}: {status}")
            check(cached_tokens(reply) > 0, f"prefix {i}: no cache hit on {survivor} ({reply['usage']})")
        return 0
    except Failure:
        cluster.dump_logs()
        raise
    finally:
        cluster.stop()


def default_model_cluster(args, run_dir, extra=()):
    model = os.path.join(ROOT, "models", "gemma-3-270m-q4_k_m.gguf")
    if not os.path.exists(model):
        skip(f"default model not installed at {model} (scripts/setup.sh installs it)")
        return None
    return Cluster(args.ubatch, model, run_dir, n_parallel=2, n_ctx=4096, extra=extra)


def long_body(max_tokens):
    return {"prompt": prefix_text("F") + " Tell a long story.", "max_tokens": max_tokens, "ignore_eos": True,
            "temperature": 0}


def place_on_one_replica(cluster):
    status, headers, _ = post(cluster.port, "/v1/completions", long_body(2))
    check(status == 200, f"warm-up: {status}")
    victim = headers["x-served-by"]
    return victim, ("r2" if victim == "r1" else "r1")


def wait_metric(port, name, value, timeout_s=60, at_most=False):
    """Polls the replica's /metrics until `name` (summed over its models' labels) >= value
    (<= value with at_most)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        v = metric_value(port, name)
        if (v <= value) if at_most else (v >= value):
            return True
        time.sleep(0.05)
    return False


def metric_value(port, name):
    """The replica's /metrics value of `name` (summed over its models' labels); 0 when absent."""
    status, text = get(port, "/metrics")
    check(status == 200, f"/metrics answered {status}")
    total = 0.0
    for line in text.splitlines():
        if line.startswith(name + " ") or line.startswith(name + '{model="'):
            total += float(line.split()[-1])
    return total


def raw_post(port, path, body):
    """Sends a request on a socket and leaves it open (closing it cancels the request)."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=30)
    data = json.dumps(body).encode()
    sock.sendall(f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                 f"Content-Length: {len(data)}\r\n\r\n".encode() + data)
    return sock


def scenario_failover(args, run_dir):
    cluster = default_model_cluster(args, run_dir)
    if cluster is None:
        return SKIP
    try:
        victim, survivor = place_on_one_replica(cluster)
        vport = cluster.replica_port(victim)

        # 1. Saturation: fill the victim's slots (2) and admission queue (4) directly, past the
        # balancer. A request for its prefix is refused there (503) and replayed on the other
        # replica; the health check takes the victim out until it has room again, then its
        # keys come back to it.
        # These requests must stay in flight for the whole phase (the queue filled, a health
        # check failed twice, 1 s apart), so they opt out of speculative decoding: greedy
        # generation with ignore_eos loops, prompt lookup then accepts nearly every draft and
        # 1500 tokens took 6 s (4 ms per token) instead of over 20 s — the slots emptied before
        # the balancer saw the replica saturated. Speculation itself is tested elsewhere.
        saturating = dict(long_body(1500), stream=True, speculative=False)
        direct = [raw_post(vport, "/v1/completions", saturating) for _ in range(2)]
        check(wait_metric(vport, "ubatch_requests_running", 2), "the victim's slots never filled")
        # Then waiting requests, one at a time, each once the server has counted the one
        # before, until /health says saturated (the server counts a request admitted during the
        # current step as waiting until the step ends, so the queue may fill one request early).
        status, body = 200, ""
        submitted = metric_value(vport, "ubatch_requests_submitted_total")
        for _ in range(8):
            direct.append(raw_post(vport, "/v1/completions", saturating))
            submitted += 1
            check(wait_metric(vport, "ubatch_requests_submitted_total", submitted), "a direct request never arrived")
            deadline = time.monotonic() + 0.5
            while time.monotonic() < deadline:
                status, body = get(vport, "/health")
                if status != 200:
                    break
                time.sleep(0.05)
            if status != 200:
                break
        check(status == 503 and '"saturated"' in body, f"/health of a full replica: {status} {body}")
        check(wait_metric(vport, "ubatch_requests_queued", 3), "the victim's queue never filled")
        status, headers, reply = post(cluster.port, "/v1/completions", long_body(2))
        check(status == 200, f"request for a saturated replica's prefix: {status} {reply}")
        check(headers.get("x-served-by") == survivor, f"answered by {headers.get('x-served-by')}")
        check(cluster.wait_status(victim, "DOWN"), f"{victim} not taken out while saturated")
        log(f"{victim} saturated: /health 503, its prefix answered by {survivor}, {victim} DOWN")
        for sock in direct:
            sock.close()
        check(cluster.wait_status(victim, "UP"), f"{victim} not back UP once it had room")
        status, headers, _ = post(cluster.port, "/v1/completions", long_body(2))
        check(status == 200 and headers.get("x-served-by") == victim, f"prefix not back on {victim}: {headers}")
        log(f"{victim} back UP, its prefix back on it")
        check(wait_metric(vport, "ubatch_requests_running", 0, at_most=True) and
              wait_metric(vport, "ubatch_requests_queued", 0, at_most=True), "the direct requests did not end")

        # 2. kill -9 with requests in flight.
        submitted = metric_value(vport, "ubatch_requests_submitted_total")
        streams = [Stream(cluster.port, "/v1/completions", long_body(1500)) for _ in range(2)]
        for s in streams:
            check(s.served_by == victim, f"stream served by {s.served_by}, not {victim}")
            s.read_frames(2)
            check(s.outcome is None, f"stream ended early: {s.outcome}")
        # A non-streaming request waits on the same replica (its 2 slots are taken).
        pending = {}
        t = threading.Thread(target=lambda: pending.update(
            zip(("status", "headers", "body"), post(cluster.port, "/v1/completions", long_body(8)))), daemon=True)
        t.start()
        check(wait_metric(vport, "ubatch_requests_submitted_total", submitted + 3),
              "the third request never reached the replica")
        killed_at = time.monotonic()
        cluster.signal(victim, "KILL")
        for s in streams:
            check(s.read_all() == "cut", f"a stream on the killed replica ended with {s.outcome}")
            log(f"stream cut {s.ended_at - killed_at:.2f} s after the kill, after {s.frames} frames")
            check(s.ended_at - killed_at < 30, "the client waited more than 30 s for a cut stream")
        t.join(timeout=120)
        check(not t.is_alive(), "the non-streaming request hangs")
        check(pending["status"] == 200, f"the waiting request was not replayed: {pending}")
        check(pending["headers"].get("x-served-by") == survivor, f"answered by {pending['headers']}")
        log(f"the waiting request was replayed on {survivor}: 200")
        status, headers, _ = post(cluster.port, "/v1/completions", long_body(2))
        check(status == 200 and headers.get("x-served-by") == survivor, f"new request: {status} {headers}")
        return 0
    except Failure:
        cluster.dump_logs()
        raise
    finally:
        cluster.stop()


def scenario_drain(args, run_dir):
    help_text = subprocess.run([args.ubatch, "serve", "--help"], capture_output=True, text=True).stdout
    if "--shutdown-timeout" not in help_text:
        return skip("this `ubatch serve` has no --shutdown-timeout (SIGTERM drain): nothing to test")
    cluster = default_model_cluster(args, run_dir, extra=("--shutdown-timeout", "120"))
    if cluster is None:
        return SKIP
    try:
        victim, survivor = place_on_one_replica(cluster)
        pid = cluster.replica_pid(victim)
        streams = [Stream(cluster.port, "/v1/completions", long_body(200)) for _ in range(2)]
        for s in streams:
            check(s.served_by == victim, f"stream served by {s.served_by}, not {victim}")
            s.read_frames(2)
        cluster.signal(victim, "TERM")
        # The signal is handled asynchronously: a request that reaches the replica before the
        # drain begins is admitted and served, rightly. Wait until the replica says it drains.
        vport = cluster.replica_port(victim)
        deadline = time.monotonic() + 30
        while get(vport, "/health", timeout=5)[0] != 503 and time.monotonic() < deadline:
            time.sleep(0.05)
        check(get(vport, "/health", timeout=5)[0] == 503, f"{victim}'s /health not 503 after SIGTERM")
        # Requests sent while it drains go to the other replica (refused there, retried here).
        for i in range(3):
            status, headers, reply = post(cluster.port, "/v1/completions", long_body(2))
            check(status == 200, f"request during the drain: {status} {reply}")
            check(headers.get("x-served-by") == survivor, f"served by {headers.get('x-served-by')} while draining")
        for s in streams:
            check(s.read_all() == "done", f"a stream on the draining replica ended with {s.outcome}")
        log(f"both streams on {victim} finished during the drain ({[s.frames for s in streams]} frames)")
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                break
            time.sleep(0.1)
        check(cluster.wait_status(victim, "DOWN"), f"{victim} not marked DOWN after it drained")
        return 0
    except Failure:
        cluster.dump_logs()
        raise
    finally:
        cluster.stop()


def skip(reason):
    log(f"SKIPPED: {reason}")
    return SKIP


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--scenario", choices=("affinity", "failover", "drain"), required=True)
    ap.add_argument("--ubatch", required=True, help="the built ubatch binary")
    ap.add_argument("--shared", default=os.path.join(os.path.dirname(ROOT), "shared"), help="../shared")
    args = ap.parse_args()
    if shutil.which("haproxy") is None:
        return skip("haproxy not installed (scripts/setup.sh installs the Debian package)")
    if not os.access(args.ubatch, os.X_OK):
        return skip(f"ubatch binary not built at {args.ubatch}")
    run_dir = tempfile.mkdtemp(prefix=f"ubatch-cluster-{args.scenario}-")
    try:
        rc = {"affinity": scenario_affinity, "failover": scenario_failover, "drain": scenario_drain}[args.scenario](
            args, run_dir)
        if rc == 0:
            log(f"PASS {args.scenario}")
        return rc
    except Failure as e:
        log(f"FAIL {args.scenario}: {e}")
        return 1
    finally:
        shutil.rmtree(run_dir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
