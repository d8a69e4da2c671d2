#!/usr/bin/env bash
# Builds the libFuzzer targets of fuzz/ with clang (build-fuzz/, -DUBATCH_FUZZ=ON) and runs
# each for a fixed time on its seed corpus (fuzz/corpus/<target>/, read only; new inputs go
# to build-fuzz/corpus/<target>/, kept between runs). A finding stops with the reproducer's
# path (build-fuzz/findings/) and a non-zero exit. docs/FUZZING.md has the long runs.
# Usage: scripts/fuzz.sh [--seconds N] [--seed N] [--jobs N] [--build-only] [--tests REGEX TEST_FILE...] [target_fuzz ...]
#   (default: 20 s, every target, a random seed; --seed makes a run follow the same sequence of inputs,
#   as CI's smoke run does: a new finding then comes from a change, not from the draw)
# --build-only: configure and build (the same tree and targets as the same call without it), then
# exit; scripts/test.sh runs it in the background at idle priority during the Release tests.
# --tests: first build those test files (test_*.cpp names without .cpp; they build into the
# per-layer test executables, tests/CMakeLists.txt) in the same tree (every library there is
# compiled once, with ASan + UBSan and coverage, for both) and run the CTest tests matching
# REGEX under the sanitizers; scripts/test.sh does, so that CI compiles the sanitized libraries
# once.
# Skips visibly (exit 0) when clang cannot build a libFuzzer binary; exit 3 instead with
# --tests, so that the caller can run those tests in a GCC build.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
SECONDS_PER_TARGET=20
JOBS=$(nproc)
TARGETS=()
SEED=""
TEST_REGEX=""
TEST_TARGETS=()
BUILD_ONLY=0
while [ $# -gt 0 ]; do
  case "$1" in
    --seconds) SECONDS_PER_TARGET=$2; shift 2 ;;
    --seed) SEED=$2; shift 2 ;;
    --jobs) JOBS=$2; shift 2 ;;
    --tests) TEST_REGEX=$2; shift 2 ;;
    --build-only) BUILD_ONLY=1; shift ;;
    test_*) TEST_TARGETS+=("$1"); shift ;;
    *_fuzz) TARGETS+=("$1"); shift ;;
    *) echo "usage: $0 [--seconds N] [--seed N] [--jobs N] [--build-only] [--tests REGEX TEST_FILE...] [target_fuzz ...]" >&2; exit 2 ;;
  esac
done
[ ${#TARGETS[@]} -eq 0 ] && TARGETS=(gguf_fuzz tokenizer_fuzz chat_fuzz json_request_fuzz sse_fuzz grammar_fuzz model_load_fuzz \
  template_fuzz tool_call_fuzz)

CXX_FUZZ=""
for c in clang++ clang++-14; do
  if command -v "$c" >/dev/null 2>&1; then CXX_FUZZ=$(command -v "$c"); break; fi
done
probe_dir=$(mktemp -d)
trap 'rm -rf "$probe_dir"' EXIT
printf 'extern "C" int LLVMFuzzerTestOneInput(const unsigned char*, unsigned long) { return 0; }\n' > "$probe_dir/p.cpp"
if [ -z "$CXX_FUZZ" ] || ! "$CXX_FUZZ" -fsanitize=fuzzer,address,undefined "$probe_dir/p.cpp" -o "$probe_dir/p" 2>"$probe_dir/err"; then
  echo "== SKIPPED: fuzz smoke — clang cannot build a libFuzzer binary here (${CXX_FUZZ:-no clang++ found}):"
  sed 's/^/   /' "$probe_dir/err" 2>/dev/null | head -5 || true
  echo "   install clang and libclang-rt-dev (scripts/setup.sh does)"
  [ -n "$TEST_REGEX" ] && exit 3
  exit 0
fi

echo "== building fuzz targets${TEST_REGEX:+ and ${#TEST_TARGETS[@]} test files} with $CXX_FUZZ (build-fuzz/, -O1; the layers no fuzz target links at -O0)"
# -O1: libFuzzer's recommended level, and a third faster to compile than -O2 under the sanitizers.
# -gline-tables-only: the reports' stack frames keep their file:line; full -g cost 13% more
# compile time (clang 14) and much longer links.
TEST_FILES="$(IFS=';'; echo "${TEST_TARGETS[*]}")"
CXX="$CXX_FUZZ" cmake -S . -B build-fuzz -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -gline-tables-only" -DUBATCH_FUZZ=ON \
  -DUBATCH_TEST_FILES="$TEST_FILES" >/dev/null
build_targets=("${TARGETS[@]}")
[ -n "$TEST_REGEX" ] && build_targets+=(ubatch_tests)
cmake --build build-fuzz --target "${build_targets[@]}"
[ "$BUILD_ONLY" = 1 ] && exit 0

if [ -n "$TEST_REGEX" ]; then
  echo "== tests under AddressSanitizer + UBSan (clang): ${#TEST_TARGETS[@]} test files, CTest -R '$TEST_REGEX'"
  ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
    ctest --test-dir build-fuzz --output-on-failure -j "$(nproc)" -R "$TEST_REGEX"
fi

mkdir -p build-fuzz/findings
# Each libFuzzer process is single-threaded: --jobs of them run side by side (default: one per
# core), each for its full SECONDS_PER_TARGET; results are printed in target order.
fuzz_one() {
  local t=$1 work="build-fuzz/corpus/$1" rc=0
  mkdir -p "$work"
  local args=(-max_total_time="$SECONDS_PER_TARGET" -timeout=30 -rss_limit_mb=4096 -print_final_stats=1
        -artifact_prefix="$ROOT/build-fuzz/findings/$t-")
  [ -n "$SEED" ] && args+=(-seed="$SEED")
  [ -f "fuzz/$t.dict" ] && args+=(-dict="fuzz/$t.dict")
  [ "$t" = gguf_fuzz ] && args+=(-max_len=65536)
  UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 ASAN_OPTIONS=detect_leaks=1 \
    "build-fuzz/fuzz/$t" "${args[@]}" "$work" "fuzz/corpus/$t" >"build-fuzz/$t.log" 2>&1 || rc=$?
  echo "$rc" >"build-fuzz/$t.rc"
}
echo "== fuzz smoke: ${#TARGETS[@]} targets, ${SECONDS_PER_TARGET} s each, $JOBS at a time"
for t in "${TARGETS[@]}"; do
  rm -f "build-fuzz/$t.rc"
  while [ "$(jobs -rp | wc -l)" -ge "$JOBS" ]; do wait -n || true; done
  fuzz_one "$t" &
done
wait
status=0
for t in "${TARGETS[@]}"; do
  log="build-fuzz/$t.log"
  if [ "$(cat "build-fuzz/$t.rc" 2>/dev/null)" = 0 ]; then
    runs=$(grep -Eo 'stat::number_of_executed_units: *[0-9]+' "$log" | grep -Eo '[0-9]+$' || echo "?")
    echo "   $t: ok, ${SECONDS_PER_TARGET} s, $runs executions, corpus $(ls "build-fuzz/corpus/$t" | wc -l) inputs"
  else
    status=1
    echo "   FINDING in $t (log: $log):"
    grep -E 'fuzz check failed|ERROR: |SUMMARY: |Test unit written' "$log" | head -8 | sed 's/^/   /'
  fi
done
exit $status
