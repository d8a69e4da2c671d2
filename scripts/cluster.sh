#!/usr/bin/env bash
# Several `ubatch serve` replicas on loopback ports with HAProxy in front
# (deploy/haproxy/haproxy.cfg; docs/DEPLOY.md): start them, show their state, signal one, stop.
#
#   scripts/cluster.sh start [options] [-- more `ubatch serve` options]
#   scripts/cluster.sh status [--run-dir DIR]
#   scripts/cluster.sh signal I SIGNAL [--run-dir DIR]   # e.g. `signal 2 KILL` (failover drills)
#   scripts/cluster.sh stop [--run-dir DIR]
#
# start options (defaults in brackets):
#   --replicas N         replicas [2]
#   --model PATH         GGUF model [models/gemma-3-270m-q4_k_m.gguf]
#   --threads T          threads per replica [1]
#   --n-parallel P       --n-parallel per replica [8]
#   --max-queue Q        --max-queue per replica [2 × P]; HAProxy's maxconn per replica is P + Q
#   --n-ctx C            --n-ctx per replica [0: serve's default]
#   --port P             balancer port [8080; 0: a free port]
#   --stats-port P       stats page (/stats) and HAProxy's Prometheus metrics (/metrics) [8404; 0: a free port]
#   --replica-port P     replicas on P, P+1, … [8081; 0: ports the replicas choose]
#   --affinity on|off    on: prefix-affine consistent hashing; off: least connections [on]
#   --affinity-bytes N   bytes of the prompt / first message hashed [256]
#   --balance-factor F   hash-balance-factor: no replica above F% of the mean load (0: unbounded) [150]
#   --run-dir DIR        pids, ports, logs, the rendered haproxy.cfg [build/cluster]
#   --ubatch PATH        the ubatch binary [build/ubatch]
#   --ready-timeout S    seconds to wait for every replica's /health [300]
# stop: HAProxy finishes what is in flight (soft stop), then each replica gets SIGTERM and
# --grace seconds [60] before SIGKILL.
#
# The run directory holds cluster.env (LB_PORT, STATS_PORT, REPLICAS), replica-I.{pid,port,log},
# haproxy.{pid,log,cfg} and prometheus-targets.json (file_sd_configs, deploy/prometheus/).
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"

die() { echo "cluster.sh: $*" >&2; exit 1; }
usage() { sed -n '2,/^set -euo/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//'; }

# GET http://127.0.0.1:PORT/PATH → prints the status code (000 when no answer), body to $2 if given.
http_status() {
  python3 - "$1" "${2:-/dev/null}" <<'EOF'
import sys, urllib.request, urllib.error
url, out = sys.argv[1], sys.argv[2]
try:
    with urllib.request.urlopen(url, timeout=5) as r:
        code, body = r.status, r.read()
except urllib.error.HTTPError as e:
    code, body = e.code, e.read()
except Exception:
    code, body = 0, b""
open(out, "wb").write(body)
print(f"{code:03d}")
EOF
}

free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

alive() { [ -n "${1:-}" ] && kill -0 "$1" 2>/dev/null; }

cmd="${1:-}"
[ -n "$cmd" ] && shift
case "$cmd" in -h|--help|help) usage; exit 0 ;; esac
RUN_DIR="$ROOT/build/cluster"
REPLICAS=2
MODEL="$ROOT/models/gemma-3-270m-q4_k_m.gguf"
THREADS=1
N_PARALLEL=8
MAX_QUEUE=""
N_CTX=0
LB_PORT=8080
STATS_PORT=8404
REPLICA_PORT=8081
AFFINITY=on
AFFINITY_BYTES=256
BALANCE_FACTOR=150
UBATCH="$ROOT/build/ubatch"
READY_TIMEOUT=300
GRACE=60
SERVE_EXTRA=()
POS=()
while [ $# -gt 0 ]; do
  case "$1" in
    --replicas) REPLICAS="$2"; shift 2 ;;
    --model) MODEL="$2"; shift 2 ;;
    --threads) THREADS="$2"; shift 2 ;;
    --n-parallel) N_PARALLEL="$2"; shift 2 ;;
    --max-queue) MAX_QUEUE="$2"; shift 2 ;;
    --n-ctx) N_CTX="$2"; shift 2 ;;
    --port) LB_PORT="$2"; shift 2 ;;
    --stats-port) STATS_PORT="$2"; shift 2 ;;
    --replica-port) REPLICA_PORT="$2"; shift 2 ;;
    --affinity) AFFINITY="$2"; shift 2 ;;
    --affinity-bytes) AFFINITY_BYTES="$2"; shift 2 ;;
    --balance-factor) BALANCE_FACTOR="$2"; shift 2 ;;
    --run-dir) RUN_DIR="$2"; shift 2 ;;
    --ubatch) UBATCH="$2"; shift 2 ;;
    --ready-timeout) READY_TIMEOUT="$2"; shift 2 ;;
    --grace) GRACE="$2"; shift 2 ;;
    --) shift; SERVE_EXTRA=("$@"); break ;;
    -h|--help) usage; exit 0 ;;
    -*) die "unknown option $1 (see --help)" ;;
    *) POS+=("$1"); shift ;;
  esac
done
RUN_DIR="$(mkdir -p "$RUN_DIR" && cd "$RUN_DIR" && pwd)"

stop_cluster() {
  local pid
  if [ -f "$RUN_DIR/haproxy.pid" ]; then
    pid=$(cat "$RUN_DIR/haproxy.pid")
    if alive "$pid"; then
      kill -USR1 "$pid" 2>/dev/null || true  # soft stop: stop listening, finish what is in flight
      for _ in $(seq 1 $((GRACE * 10))); do alive "$pid" || break; sleep 0.1; done
      alive "$pid" && kill -KILL "$pid" 2>/dev/null || true
    fi
    rm -f "$RUN_DIR/haproxy.pid"
  fi
  local pids=()
  for f in "$RUN_DIR"/replica-*.pid; do
    [ -f "$f" ] || continue
    pid=$(cat "$f")
    alive "$pid" && kill -TERM "$pid" 2>/dev/null && pids+=("$pid")
    rm -f "$f"
  done
  for pid in "${pids[@]}"; do
    for _ in $(seq 1 $((GRACE * 10))); do alive "$pid" || break; sleep 0.1; done
    if alive "$pid"; then
      echo "cluster.sh: replica pid $pid still running after ${GRACE}s: SIGKILL" >&2
      kill -KILL "$pid" 2>/dev/null || true
    fi
  done
}

# Waits for the replica's "listening on" line (its port, for --replica-port 0), then /health 200.
wait_replica() {
  local i=$1 port="" log="$RUN_DIR/replica-$1.log" pid
  pid=$(cat "$RUN_DIR/replica-$i.pid")
  local deadline=$((SECONDS + READY_TIMEOUT))
  while [ -z "$port" ]; do
    port=$(sed -n 's/.*listening on http:\/\/127\.0\.0\.1:\([0-9]*\).*/\1/p' "$log" | head -n 1)
    [ -n "$port" ] && break
    alive "$pid" || { cat "$log" >&2; die "replica $i exited during start-up (log above)"; }
    [ $SECONDS -lt $deadline ] || die "replica $i printed no port in ${READY_TIMEOUT}s ($log)"
    sleep 0.1
  done
  echo "$port" > "$RUN_DIR/replica-$i.port"
  until [ "$(http_status "http://127.0.0.1:$port/health")" = 200 ]; do
    alive "$pid" || { cat "$log" >&2; die "replica $i exited while loading (log above)"; }
    [ $SECONDS -lt $deadline ] || die "replica $i not healthy after ${READY_TIMEOUT}s ($log)"
    sleep 0.2
  done
}

start_cluster() {
  command -v haproxy >/dev/null || die "haproxy not found (Debian: apt-get install haproxy)"
  [ -x "$UBATCH" ] || die "ubatch binary not found at $UBATCH (build it: cmake --build build)"
  [ -f "$MODEL" ] || die "model not found: $MODEL"
  [ "$AFFINITY" = on ] || [ "$AFFINITY" = off ] || die "--affinity must be on or off"
  [ "$REPLICAS" -ge 1 ] 2>/dev/null || die "--replicas must be a positive integer"
  [ -n "$MAX_QUEUE" ] || MAX_QUEUE=$((2 * N_PARALLEL))
  if [ -f "$RUN_DIR/haproxy.pid" ] || compgen -G "$RUN_DIR/replica-*.pid" >/dev/null; then
    die "a cluster is already running from $RUN_DIR (scripts/cluster.sh stop --run-dir $RUN_DIR)"
  fi
  rm -f "$RUN_DIR"/replica-*.log "$RUN_DIR"/replica-*.port "$RUN_DIR/haproxy.log" "$RUN_DIR/cluster.env"
  # Whatever ends the start early (die, a failing command), nothing it started keeps running.
  STARTED=0
  trap '[ "$STARTED" = 1 ] || { echo "cluster.sh: start failed; stopping what was started" >&2; GRACE=5 stop_cluster; }' EXIT

  local i port
  for i in $(seq 1 "$REPLICAS"); do
    port=0
    [ "$REPLICA_PORT" != 0 ] && port=$((REPLICA_PORT + i - 1))
    : > "$RUN_DIR/replica-$i.log"  # exists before wait_replica reads it
    "$UBATCH" serve -m "$MODEL" --host 127.0.0.1 --port "$port" --threads "$THREADS" --n-parallel "$N_PARALLEL" \
      --max-queue "$MAX_QUEUE" --n-ctx "$N_CTX" --alias "$(basename "$MODEL" .gguf)" ${SERVE_EXTRA[@]+"${SERVE_EXTRA[@]}"} \
      </dev/null >"$RUN_DIR/replica-$i.log" 2>&1 &
    echo $! > "$RUN_DIR/replica-$i.pid"
  done
  for i in $(seq 1 "$REPLICAS"); do wait_replica "$i"; done

  # The config with this cluster's server lines (and, affinity off, least connections).
  local maxconn=$((N_PARALLEL + MAX_QUEUE)) servers=""
  for i in $(seq 1 "$REPLICAS"); do
    servers+="    server r$i 127.0.0.1:$(cat "$RUN_DIR/replica-$i.port") maxconn $maxconn"$'\n'
  done
  SERVERS="$servers" AFFINITY="$AFFINITY" BALANCE_FACTOR="$BALANCE_FACTOR" python3 - "$ROOT/deploy/haproxy/haproxy.cfg" "$RUN_DIR/haproxy.cfg" <<'EOF'
import os, re, sys
text = open(sys.argv[1]).read()
begin, end = "    # servers: begin", "    # servers: end"
a, b = text.index(begin), text.index(end)
text = text[:a] + begin + " (rendered by scripts/cluster.sh)\n" + os.environ["SERVERS"] + text[b:]
if os.environ["AFFINITY"] == "off":
    text, n = re.subn(r"^    balance hash var\(txn\.affinity\)$", "    balance leastconn", text, flags=re.M)
    assert n == 1, "balance line not found"
text, n = re.subn(r"^    hash-balance-factor \d+$", "    hash-balance-factor " + os.environ["BALANCE_FACTOR"], text, flags=re.M)
assert n == 1, "hash-balance-factor line not found"
open(sys.argv[2], "w").write(text)
EOF
  # Free ports (0) are picked here and bound by HAProxy a moment later: if another process
  # took one meanwhile, pick again (three tries).
  local want_lb=$LB_PORT want_stats=$STATS_PORT attempt
  for attempt in 1 2 3; do
    [ "$want_lb" = 0 ] && LB_PORT=$(free_port)
    [ "$want_stats" = 0 ] && STATS_PORT=$(free_port)
    export UBATCH_LB_BIND="127.0.0.1:$LB_PORT" UBATCH_LB_STATS_BIND="127.0.0.1:$STATS_PORT"
    export UBATCH_AFFINITY_BYTES="$AFFINITY_BYTES"
    haproxy -c -q -f "$RUN_DIR/haproxy.cfg" || die "rendered config is invalid: $RUN_DIR/haproxy.cfg"
    haproxy -db -f "$RUN_DIR/haproxy.cfg" </dev/null >"$RUN_DIR/haproxy.log" 2>&1 &
    echo $! > "$RUN_DIR/haproxy.pid"
    local deadline=$((SECONDS + 30)) up=0
    while [ $SECONDS -lt $deadline ]; do
      [ "$(http_status "http://127.0.0.1:$STATS_PORT/stats")" = 200 ] && { up=1; break; }
      alive "$(cat "$RUN_DIR/haproxy.pid")" || break
      sleep 0.1
    done
    [ $up = 1 ] && break
    if ! alive "$(cat "$RUN_DIR/haproxy.pid")" && grep -q "cannot bind" "$RUN_DIR/haproxy.log" &&
       { [ "$want_lb" = 0 ] || [ "$want_stats" = 0 ]; } && [ $attempt -lt 3 ]; then
      continue
    fi
    cat "$RUN_DIR/haproxy.log" >&2
    die "haproxy did not start (log above)"
  done
  STARTED=1

  {
    echo "LB_PORT=$LB_PORT"
    echo "STATS_PORT=$STATS_PORT"
    echo "REPLICAS=$REPLICAS"
    echo "AFFINITY=$AFFINITY"
  } > "$RUN_DIR/cluster.env"
  python3 - "$RUN_DIR" "$REPLICAS" > "$RUN_DIR/prometheus-targets.json" <<'EOF'
import json, sys
run, n = sys.argv[1], int(sys.argv[2])
ports = [open(f"{run}/replica-{i}.port").read().strip() for i in range(1, n + 1)]
print(json.dumps([{"targets": [f"127.0.0.1:{p}" for p in ports], "labels": {"cluster": run}}], indent=2))
EOF
  echo "cluster: $REPLICAS replica(s) of $(basename "$MODEL") (--threads $THREADS --n-parallel $N_PARALLEL" \
       "--max-queue $MAX_QUEUE; maxconn $maxconn), affinity $AFFINITY, hash-balance-factor $BALANCE_FACTOR"
  for i in $(seq 1 "$REPLICAS"); do
    echo "  r$i  http://127.0.0.1:$(cat "$RUN_DIR/replica-$i.port")  pid $(cat "$RUN_DIR/replica-$i.pid")"
  done
  echo "  balancer  http://127.0.0.1:$LB_PORT   stats  http://127.0.0.1:$STATS_PORT/stats   run dir $RUN_DIR"
}

status_cluster() {
  [ -f "$RUN_DIR/cluster.env" ] || die "no cluster in $RUN_DIR"
  # shellcheck disable=SC1091
  . "$RUN_DIR/cluster.env"
  local i pid port code
  for i in $(seq 1 "$REPLICAS"); do
    pid=$(cat "$RUN_DIR/replica-$i.pid" 2>/dev/null || echo "")
    port=$(cat "$RUN_DIR/replica-$i.port" 2>/dev/null || echo "?")
    if alive "$pid"; then
      code=$(http_status "http://127.0.0.1:$port/health" "$RUN_DIR/.health")
      echo "r$i  port $port  pid $pid  /health $code $(head -c 200 "$RUN_DIR/.health")"
    else
      echo "r$i  port $port  not running"
    fi
  done
  if [ "$(http_status "http://127.0.0.1:$STATS_PORT/stats;csv" "$RUN_DIR/.stats.csv")" = 200 ]; then
    echo "balancer http://127.0.0.1:$LB_PORT (stats http://127.0.0.1:$STATS_PORT/stats):"
    python3 - "$RUN_DIR/.stats.csv" <<'EOF'
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1]).read().lstrip("# ").splitlines()))
print(f"  {'server':8} {'status':12} {'in flight':>9} {'queued':>6} {'max':>5} {'total':>7} {'5xx':>5} {'retries':>7} {'redisp':>6}")
for r in rows:
    if r["pxname"] != "ubatch_replicas" or r["svname"] == "FRONTEND":
        continue
    print(f"  {r['svname']:8} {r['status']:12} {r['scur']:>9} {r['qcur']:>6} {r['smax']:>5} {r['stot']:>7} "
          f"{r['hrsp_5xx']:>5} {r['wretr']:>7} {r['wredis']:>6}")
EOF
  else
    echo "balancer: not answering on $STATS_PORT"
  fi
}

signal_replica() {
  [ ${#POS[@]} -eq 2 ] || die "usage: cluster.sh signal I SIGNAL"
  local i="${POS[0]}" sig="${POS[1]}" pid
  pid=$(cat "$RUN_DIR/replica-$i.pid" 2>/dev/null) || die "no replica $i in $RUN_DIR"
  alive "$pid" || die "replica $i (pid $pid) is not running"
  kill -s "$sig" "$pid"
  echo "sent SIG${sig#SIG} to r$i (pid $pid)"
}

case "$cmd" in
  start) start_cluster ;;
  status) status_cluster ;;
  signal) signal_replica ;;
  stop) stop_cluster; rm -f "$RUN_DIR/cluster.env"; echo "cluster in $RUN_DIR stopped" ;;
  *) die "usage: cluster.sh start|status|signal|stop [options] (see --help)" ;;
esac
