#!/usr/bin/env python3
"""Property-based API conformance of `ubatch serve` with schemathesis (PyPI), driven by the
OpenAPI document of the API (docs/openapi.yaml).

Usage:
  tests/python/schemathesis_run.py --binary build/ubatch --model models/gemma-3-270m-q4_k_m.gguf \
      [--schema docs/openapi.yaml] [--max-examples 20] [--checks LIST] [--seed N] [-- SERVER ARGS]

Starts `BINARY serve -m MODEL --port 0` with small caps so that generated requests stay cheap
(--max-tokens 16, --max-n 2, --n-ctx 4096 unless SERVER ARGS say otherwise), waits for /health,
then runs `schemathesis run SCHEMA --url http://127.0.0.1:PORT` in positive and negative mode
(schema-valid and schema-breaking requests) with the checks in --checks. Then the server must
still be alive, answer /health, and exit 0 on SIGTERM.

Checks by default: ubatch_no_server_error (tests/python/schemathesis_hooks.py: no 5xx but the
documented refusals 503 queue_full / deadline_unattainable and 504 deadline_exceeded, told by
their error code), status_code_conformance (only statuses the document lists),
content_type_conformance, response_schema_conformance (bodies and SSE events match the
document's schemas). Not by default: positive_data_acceptance (a schema-valid request may still
get a documented 400, e.g. prompt + max_tokens over the context) and negative_data_rejection
(the API ignores unknown fields, as the OpenAI API does).

Exit status: 0 passed, 1 failed, 77 skipped (no schema document, no schemathesis, no binary or
model; the reason is printed).
"""
import argparse
import asyncio
import os
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from soak import Server, simple_get, wait_ready  # noqa: E402

SKIP = 77
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DEFAULT_CHECKS = ("ubatch_no_server_error,status_code_conformance,content_type_conformance,"
                  "response_schema_conformance")
HOOKS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "schemathesis_hooks.py")
SMALL_CAPS = {"--max-tokens": "16", "--max-n": "2", "--n-ctx": "4096"}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--binary", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--schema", default=os.path.join(ROOT, "docs", "openapi.yaml"))
    ap.add_argument("--max-examples", type=int, default=20, help="test cases per operation and phase")
    ap.add_argument("--checks", default=DEFAULT_CHECKS)
    ap.add_argument("--mode", default="all", choices=["positive", "negative", "all"])
    ap.add_argument("--phases", default="examples,coverage,fuzzing")
    ap.add_argument("--seed", type=int, default=17)
    ap.add_argument("--workers", default="1", help="schemathesis workers (1: CPython 3.11.7 + hypothesis hit an AST SystemError with 2)")
    ap.add_argument("--timeout", type=float, default=1800.0, help="seconds for the whole schemathesis run")
    ap.add_argument("--report-dir", help="keep schemathesis' JUnit and NDJSON reports here")
    ap.add_argument("server_args", nargs="*", help="after --: extra `ubatch serve` arguments")
    args = ap.parse_args()

    if not os.path.exists(args.schema):
        print(f"SKIP: no OpenAPI document at {args.schema}")
        return SKIP
    try:
        import schemathesis  # noqa: F401
    except ImportError:
        print("SKIP: python3 without the `schemathesis` package (scripts/setup.sh installs it)")
        return SKIP
    for what, path in (("ubatch binary", args.binary), ("model", args.model)):
        if not os.path.exists(path):
            print(f"SKIP: {what} not found at {path}")
            return SKIP

    server_args = list(args.server_args)
    for flag, value in SMALL_CAPS.items():
        if flag not in server_args:
            server_args += [flag, value]
    server = Server(args.binary, args.model, server_args)
    server.start()
    print(f"started: {' '.join(server.cmd)}", flush=True)
    ok = False
    try:
        asyncio.run(wait_ready(server, 300))
        base = f"http://{server.host}:{server.port}"
        cmd = [sys.executable, "-c", "import sys; from schemathesis.cli import schemathesis; sys.exit(schemathesis())",
               "run", args.schema, "--url", base, "--checks", args.checks, "--mode", args.mode,
               "--phases", args.phases, "--max-examples", str(args.max_examples), "--seed", str(args.seed),
               "--workers", args.workers, "--request-timeout", "120", "--no-color",
               "--generation-database", "none", "--suppress-health-check", "too_slow,filter_too_much",
               # An endless event stream (never a complete response): tests/test_server_openapi.cpp
               # checks its snapshots against the document, tests/test_server_webui.cpp the rest.
               "--exclude-operation-id", "dashboardEvents"]
        if args.report_dir:
            cmd += ["--report", "junit,ndjson", "--report-dir", os.path.abspath(args.report_dir)]
        print("running: schemathesis " + " ".join(cmd[3:]), flush=True)
        t0 = time.monotonic()
        try:
            # In a scratch directory: schemathesis keeps a .schemathesis/ cache in its working directory.
            with tempfile.TemporaryDirectory(prefix="ubatch_schemathesis_") as scratch:
                env = dict(os.environ, SCHEMATHESIS_HOOKS=HOOKS)
                st = subprocess.run(cmd, timeout=args.timeout, stdin=subprocess.DEVNULL, cwd=scratch, env=env)
            st_code = st.returncode
        except subprocess.TimeoutExpired:
            print(f"FAIL: schemathesis did not finish within {args.timeout} s")
            st_code = None
        print(f"schemathesis exit status {st_code} after {time.monotonic() - t0:.0f} s")
        alive = server.alive()
        health = None
        if alive:
            health, _ = asyncio.run(simple_get(server.host, server.port, "/health", timeout=10))
        print(f"server alive after the run: {alive}; /health: {health}")
        ok = st_code == 0 and alive and health == 200
    except Exception as e:  # noqa: BLE001 — reported with the server log
        print(f"FAIL: {type(e).__name__}: {e}")
    finally:
        code = server.stop()
        print(f"server exit status after SIGTERM: {code}")
        if code != 0:
            ok = False
        if not ok:
            print("server log (tail):\n" + server.log_tail(60))
        if server.log_path:
            os.unlink(server.log_path)
    print("RESULT:", "PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
