#!/usr/bin/env bash
# Cross-builds ubatch for 64-bit ARM Linux (aarch64) on a Debian/Ubuntu x86-64 machine and,
# with --test, runs the engine's unit and parity tests as aarch64 binaries under qemu-aarch64
# user-mode emulation, once per CPU model:
#   cortex-a72   ARMv8.0 NEON, no dot product (Raspberry Pi 4)  -> SIMD level "neon"
#   neoverse-n1  ARMv8.2 with SDOT/UDOT (Graviton 2; like A76/A78) -> SIMD level "dotprod"
# then checks that the aarch64 `ubatch logits` of a short prompt on the real default model
# writes the same bytes as the x86-64 build's (build/ubatch), and that `ubatch run` gives the
# same greedy text, both computed in the same run (never a stored result).
#
#   1. installs what is missing: g++-aarch64-linux-gnu, qemu-user, and the arm64 "-dev"
#      packages of the libraries (dpkg --add-architecture arm64; multiarch, beside the host's);
#   2. configures build-arm64/ with cmake/aarch64-linux-gnu.cmake;
#   3. builds an engine-only `ubatch` (-DUBATCH_SERVER=OFF: run, logits, tokenize, bench, …
#      without `serve` and `load`) and the engine's test files below (-DUBATCH_TEST_FILES: they
#      build into the per-layer test executables, tests/CMakeLists.txt; with --all: every
#      target, the server and its tests included);
#   4. (--test) runs those tests with CTest under QEMU_CPU=<model> for each model, then the
#      default-model check against the x86-64 build.
# Emulated speed means nothing: nothing here takes a timing of the code under test (the stage
# prints how long its steps took, for the CI budget).
#
# Usage: scripts/cross_arm64.sh [--test] [--all] [--ci] [--ci-build]
#   --ci-build  steps 1-3 of --ci only (install and build, no tests): scripts/test.sh runs it in
#          the background, at idle CPU priority, while its other stages run
#   --ci   what scripts/test.sh runs: --test with CI_SELECTION below (the slowest float-model
#          cases and the 16-token greedy comparison with the reference are left to a full
#          --test run), and where the cross toolchain or qemu cannot be installed it says so and
#          exits 0 (the stage skips visibly instead of failing); every other failure still fails.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
RUN_TESTS=0
BUILD_ALL=0
CI_MODE=0
for arg in "$@"; do
  case "$arg" in
    --test) RUN_TESTS=1 ;;
    --all) BUILD_ALL=1 ;;
    --ci) CI_MODE=1; RUN_TESTS=1 ;;
    --ci-build) CI_MODE=1; RUN_TESTS=0 ;;
    *) echo "usage: $0 [--test] [--all] [--ci] [--ci-build]" >&2; exit 2 ;;
  esac
done

BUILD=build-arm64
CPU_MODELS=(cortex-a72 neoverse-n1)
EXPECT_LEVEL=(neon dotprod)
# The tests run under emulation: kernels (every level against the reference, bit for bit),
# SIMD level detection and its cap, quantization and dequantization, the end-to-end levels
# check on the tiny reference models (`ubatch logits` at every level, same bytes), the
# reference-logits and batch-invariance parity tests, the KV cache, sampling, GGUF parsing and
# the tokenizers.
TESTS=(test_cpu_features test_kernels_gemm test_kernels_matmul test_kernels_matmul_float
  test_kernels_ops test_kernels_attention test_kernels_quant test_dequant_reference
  test_levels_logits test_context_reference test_context_invariance test_kv_cache test_sampling
  test_gguf test_gguf_hostile test_tokenizer_spm test_tokenizer_bpe test_tokenizer_vectors)
# --ci leaves out (CTest -E) the slowest cases under emulation, which a full --test run keeps:
# the levels and batch-invariance checks of the largest float models (tiny-gemma3 f16 and f32,
# tiny-llama f32, and the f32 files of tiny-smollm3, tiny-gemma2 and tiny-lfm2: 34, 13 and 15 s
# under qemu; their architectures stay covered by their Q8_0 and Q4 files, F32 weights by the
# other models' f32 files, float weights by tiny-llama f16/bf16 and the MatmulFloat kernel
# tests) and the 16-token greedy generation against the reference (the reference logits of
# every model and case still run).
CI_SELECTION='/(hybrid_)?tiny_(gemma3_f16|gemma3_f32|llama_f32|smollm3_f32|gemma2_f32|lfm2_f32)( |$)|^ReferenceLogits\.GreedyGeneration'

skip_or_fail() {
  if [ "$CI_MODE" = 1 ]; then
    echo "== SKIPPED aarch64 cross-build stage: $*"
    exit 0
  fi
  echo "error: $*" >&2
  exit 1
}

# The cross toolchain and the comparison with build/ubatch are for an x86-64 host; on an ARM64
# machine the ordinary build is native and scripts/test.sh's first stage runs these tests.
host=$(uname -m)
if [ "$host" != x86_64 ]; then
  skip_or_fail "the host is $host, not x86-64 (on an ARM64 machine build natively: README.md, docs/ARM.md)"
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null 2>&1; then SUDO="sudo"; fi
fi
apt_install() {
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq -o DPkg::Lock::Timeout=900 \
    --no-install-recommends "$@"
}

# 1. Toolchain, emulator, target libraries. The header-only ones (nlohmann-json, CLI11, the
# Boost.Beast/Asio headers) are architecture-independent: the host's packages serve both builds.
HOST_PACKAGES=(g++-aarch64-linux-gnu qemu-user nlohmann-json3-dev libcli11-dev libboost-dev)
TARGET_PACKAGES=(libfmt-dev libspdlog-dev libgtest-dev libgmock-dev libpcre2-dev libxxhash-dev
  libssl-dev libicu-dev)
missing=()
for p in "${HOST_PACKAGES[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
for p in "${TARGET_PACKAGES[@]}"; do dpkg -s "$p:arm64" >/dev/null 2>&1 || missing+=("$p:arm64"); done
if [ ${#missing[@]} -gt 0 ]; then
  echo "== installing: ${missing[*]}"
  if [ "$(id -u)" -ne 0 ] && [ -z "$SUDO" ]; then
    skip_or_fail "not root and no sudo: cannot install ${missing[*]}"
  fi
  added_arch=0
  if ! dpkg --print-foreign-architectures | grep -qx arm64; then
    $SUDO dpkg --add-architecture arm64 || skip_or_fail "cannot add the arm64 architecture to dpkg"
    added_arch=1
  fi
  if ! $SUDO apt-get update -qq -o DPkg::Lock::Timeout=900; then
    # (On Ubuntu the arm64 packages live on ports.ubuntu.com: the sources need arch= entries,
    # docs/ARM.md.) Leave apt as it was, so that the machine's other stages keep working.
    if [ "$added_arch" = 1 ]; then
      $SUDO dpkg --remove-architecture arm64 || true
      $SUDO apt-get update -qq -o DPkg::Lock::Timeout=900 || true
    fi
    skip_or_fail "apt-get update failed with the arm64 architecture added (no arm64 packages in these sources?)"
  fi
  apt_install "${missing[@]}" || skip_or_fail "cannot install ${missing[*]}"
fi
command -v aarch64-linux-gnu-g++ >/dev/null || skip_or_fail "aarch64-linux-gnu-g++ not found"
if [ "$RUN_TESTS" = 1 ]; then
  command -v qemu-aarch64 >/dev/null || skip_or_fail "qemu-aarch64 not found"
fi

# 2-3. Configure and build.
echo "== cross-building for aarch64 in $BUILD/"
t0=$(date +%s)
# Engine only (-DUBATCH_SERVER=OFF: no HTTP server, no load generator) unless --all: the tests
# run here are the engine's, and the server's Boost.Beast units are the costliest to compile.
SERVER=OFF
[ "$BUILD_ALL" = 1 ] && SERVER=ON
TEST_FILES="$(IFS=';'; echo "${TESTS[*]}")"
[ "$BUILD_ALL" = 1 ] && TEST_FILES=""
# --ci/--ci-build: -O2 instead of Release's -O3. The cross-build runs beside CI's other stages on
# the same two cores and is CPU time the whole run waits for; -O2 compiled the kernels' largest
# unit in 20 s against 33 s (aarch64-linux-gnu-g++ 12), and the results are the same bits
# (-ffp-contract=off, no fast-math: the default-model check below compares them with x86-64).
OPT_FLAGS=()
[ "$CI_MODE" = 1 ] && OPT_FLAGS=(-DCMAKE_CXX_FLAGS_RELEASE="-O2 -DNDEBUG")
cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DUBATCH_SERVER=$SERVER "${OPT_FLAGS[@]}" \
  -DUBATCH_TEST_FILES="$TEST_FILES" -DCMAKE_TOOLCHAIN_FILE="$ROOT/cmake/aarch64-linux-gnu.cmake" >/dev/null
cmake --build "$BUILD"
echo "== cross build took $(( $(date +%s) - t0 )) s"
file "$BUILD/ubatch" 2>/dev/null || true

[ "$RUN_TESTS" = 1 ] || exit 0

# 4. Tests under qemu, once per CPU model: every test registered in this tree (it builds only
# the files of TESTS unless --all).
# The emulator as CMake runs the tests (cmake/aarch64-linux-gnu.cmake says why -L only
# without the multiarch arm64 C library).
QEMU=(qemu-aarch64)
[ -e /lib/ld-linux-aarch64.so.1 ] || QEMU+=(-L /usr/aarch64-linux-gnu)
EXCLUDE='_NOT_BUILT$'
[ "$CI_MODE" = 1 ] && EXCLUDE="$EXCLUDE|$CI_SELECTION"
for i in "${!CPU_MODELS[@]}"; do
  cpu=${CPU_MODELS[$i]}
  want=${EXPECT_LEVEL[$i]}
  echo "== aarch64 tests under qemu-aarch64 -cpu $cpu (expected SIMD level: $want)"
  info=$(QEMU_CPU=$cpu "${QEMU[@]}" "$BUILD/tests/test_core" \
         --gtest_filter='CpuFeatures.PrintsDetected' 2>&1 | grep -E '^(cpu features|simd level)' || true)
  echo "$info" | sed 's/^/   /'
  case "$info" in
    *"simd level: $want "*) ;;
    *) echo "error: under -cpu $cpu the SIMD level is not $want" >&2; exit 1 ;;
  esac
  t0=$(date +%s)
  select=.
  # --ci: the engine tests once, under the CPU with every level (neoverse-n1: the kernel and
  # levels tests run NEON and dot product alike, each against the reference, bit for bit);
  # under cortex-a72 the detection and cap tests (test_cpu_features.cpp), and the default-model
  # check below at the NEON level it picks there.
  if [ "$CI_MODE" = 1 ] && [ "$cpu" = cortex-a72 ]; then
    select='^(CpuFeatures|CpuAmx|CpuSimdCap)\.'
    echo "   (--ci: test_cpu_features.cpp only under $cpu; the engine tests run under neoverse-n1)"
  fi
  QEMU_CPU=$cpu ctest --test-dir "$BUILD" --output-on-failure -j "$(nproc)" -R "$select" -E "$EXCLUDE"
  echo "== -cpu $cpu: tests took $(( $(date +%s) - t0 )) s"
done

# The x86-64 build and the aarch64 build on the real default model: the same tokens for a short
# prompt, the same logits bytes for every row of its forward pass, and the same greedy
# continuation, under each CPU model (so at the neon and at the dotprod level).
MODEL="$ROOT/models/gemma-3-270m-q4_k_m.gguf"
if [ ! -s "$MODEL" ] || [ ! -x build/ubatch ]; then
  echo "== SKIPPED x86-64 vs aarch64 check on the default model: needs $MODEL and build/ubatch (scripts/setup.sh)"
  exit 0
fi
PROMPT="The capital of France is"
N_PREDICT=16
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
tokens=$(printf '%s' "$PROMPT" | build/ubatch tokenize -m "$MODEL" | tr ' ' ',')
build/ubatch logits -m "$MODEL" -t 2 -c 64 --tokens "$tokens" -o "$tmp/x86.f32" >/dev/null
build/ubatch run -m "$MODEL" -t 2 -c 256 -p "$PROMPT" -n "$N_PREDICT" --temp 0 >"$tmp/x86.txt" 2>/dev/null
[ -s "$tmp/x86.f32" ] && [ -s "$tmp/x86.txt" ] || { echo "error: the x86-64 build wrote no logits or text" >&2; exit 1; }
for cpu in "${CPU_MODELS[@]}"; do
  t0=$(date +%s)
  arm_tokens=$(printf '%s' "$PROMPT" | QEMU_CPU=$cpu "${QEMU[@]}" "$BUILD/ubatch" tokenize -m "$MODEL" | tr ' ' ',')
  [ "$arm_tokens" = "$tokens" ] || { echo "error: aarch64 tokens $arm_tokens != x86-64 $tokens" >&2; exit 1; }
  QEMU_CPU=$cpu "${QEMU[@]}" "$BUILD/ubatch" logits -m "$MODEL" -t 2 -c 64 --tokens "$tokens" \
    -o "$tmp/arm-$cpu.f32" >/dev/null
  cmp "$tmp/x86.f32" "$tmp/arm-$cpu.f32" || {
    echo "error: aarch64 (-cpu $cpu) logits differ from the x86-64 build's" >&2; exit 1; }
  QEMU_CPU=$cpu "${QEMU[@]}" "$BUILD/ubatch" run -m "$MODEL" -t 2 -c 256 -p "$PROMPT" -n "$N_PREDICT" --temp 0 \
    >"$tmp/arm-$cpu.txt" 2>/dev/null
  cmp -s "$tmp/x86.txt" "$tmp/arm-$cpu.txt" || {
    echo "error: aarch64 (-cpu $cpu) greedy output differs from the x86-64 build's" >&2
    diff "$tmp/x86.txt" "$tmp/arm-$cpu.txt" >&2 || true
    exit 1; }
  echo "== default model, \"$PROMPT\" (tokens $tokens): aarch64 -cpu $cpu logits == x86-64" \
       "($(stat -c %s "$tmp/x86.f32") bytes, sha256 $(sha256sum "$tmp/x86.f32" | cut -c1-16)), greedy $N_PREDICT tokens" \
       "identical ($(( $(date +%s) - t0 )) s under qemu)"
done
echo "   greedy continuation: $(tr '\n' ' ' <"$tmp/x86.txt")"
echo "== aarch64: all passed"
