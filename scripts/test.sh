#!/usr/bin/env bash
# Runs the whole test suite on a fresh machine: installs and builds (scripts/setup.sh
# --no-run), runs every test with CTest, then builds the file-parser, grammar, HTTP-transport,
# Jinja-engine and packed-kernel tests under AddressSanitizer + UBSan and runs them, with a short
# smoke run of every fuzz target from the same sanitized build (scripts/fuzz.sh); then the
# scheduler/engine/server tests under ThreadSanitizer; then the aarch64 cross-build (engine only)
# and its engine tests under qemu-aarch64 (scripts/cross_arm64.sh --ci). Each stage prints its time.
# Tests that need ../shared/reference skip visibly where it is absent.
set -euo pipefail
cd "$(dirname "$0")/.."
# Wall-clock time since the start, printed at each stage (CI runs this within a time budget).
stamp() { echo "== [$((SECONDS / 60)) min $((SECONDS % 60)) s] $*"; }
stamp "set-up and Release build (scripts/setup.sh --no-run)"
bash scripts/setup.sh --no-run

JOBS=$(nproc)
stamp "tests (Release)"
ctest --test-dir build --output-on-failure -j "$JOBS"

# Hostile input (GGUF files, malformed models), chat rendering, the Jinja engine, tokenizer
# vectors, grammars, the HTTP transport and the packed kernels under AddressSanitizer + UBSan.
# With clang these build in the fuzzers' tree (build-fuzz/: one sanitized compile of the
# libraries for both), and every libFuzzer target then runs for 20 s (docs/FUZZING.md);
# without clang, in a GCC tree (build-asan/), and the fuzz smoke says it is skipped.
ASAN_TARGETS=(test_gguf test_gguf_hostile test_context_archs test_kernels_gemm test_tokenizer_chat test_tokenizer_segments
  test_tokenizer_vectors test_tokenizer_wpm test_grammar_gbnf test_grammar_matcher test_grammar_json_schema
  test_server_transport test_server_http test_server_webui
  test_template_lexer test_template_parser test_template_values test_template_filters test_template_tests
  test_template_statements test_template_sandbox test_template_marks test_template_chat test_template_corpus)
ASAN_REGEX='Gguf|ArchStrictLoading|Packed|ChatTemplate|ChatRules|ChatInjection|Segmented|TokenizerVectors|TokenizerWpm|WordPieceWords|GrammarGbnf|GrammarMatcher|GrammarJsonSchema|ServerTransport|ServerSse|ServerHttp|ServerUnits|ServerLifecycle|ServerWebUi\.|DashboardFeed|^Template'
stamp "AddressSanitizer + UBSan tests, then the fuzz smoke (scripts/fuzz.sh)"
fuzz_rc=0
bash scripts/fuzz.sh --seconds 20 --seed 1 --tests "$ASAN_REGEX" "${ASAN_TARGETS[@]}" || fuzz_rc=$?
if [ "$fuzz_rc" = 3 ]; then
  echo "== the same tests under AddressSanitizer + UBSan with GCC (build-asan/)"
  cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=Debug -DUBATCH_SANITIZE=ON >/dev/null
  cmake --build build-asan --target "${ASAN_TARGETS[@]}"
  ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
    ctest --test-dir build-asan --output-on-failure -j "$JOBS" -R "$ASAN_REGEX"
elif [ "$fuzz_rc" != 0 ]; then
  exit "$fuzz_rc"
fi
stamp "scheduler, engine and server tests under ThreadSanitizer"
# The server tests run the real HTTP layer (Boost.Beast, 2 I/O threads) against the engine
# thread: transport limits, pipelining, drain, SSE streams and client disconnects. Left out
# for time (8-10 min each under TSan on 2 cores, measured while the SIMD loops were still
# instrumented): ServerStream's 32 concurrent default-model streams and test_server_priority;
# they run in the Release suite above.
# Longest first, two at a time (the stream tests take about 150 s under TSan on 2 cores, the
# others 45 s or less).
TSAN_TARGETS=(test_server_stream test_server_transport test_sched_engine test_server_http test_server_webui
              test_server_models test_sched_scheduler test_server_health test_sched_preemption
              test_server_openapi test_sched_deadlines test_sched_live_view test_sched_step_gate)
# (The two ServerModels tests left out start the `ubatch` binary, which this tree does not build.)
declare -A TSAN_FILTER=([test_server_stream]='ServerDisconnect.*:ServerStream.StopStrings*'
                        [test_server_models]='-ServerModels.ServesBothEmbeddedModelsByDefault:ServerModels.RefusesAModelThatCanNeverFit')
# -O1: TSan's recommended level (faster to compile than -O2, and its reports keep their frames).
cmake -S . -B build-tsan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g" \
  -DUBATCH_TSAN=ON >/dev/null
cmake --build build-tsan --target "${TSAN_TARGETS[@]}"
# halt_on_error: any report fails the test that produced it. $JOBS binaries at a time, each
# into build-tsan/<binary>.log (printed whole when it fails).
tsan_run() {
  local t=$1 rc=0
  TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1" "build-tsan/tests/$t" --gtest_brief=1 \
    --gtest_filter="${TSAN_FILTER[$t]:-*}" >"build-tsan/$t.log" 2>&1 || rc=$?
  echo "$rc" >"build-tsan/$t.rc"
}
for t in "${TSAN_TARGETS[@]}"; do
  rm -f "build-tsan/$t.rc"
  while [ "$(jobs -rp | wc -l)" -ge "$JOBS" ]; do wait -n || true; done
  tsan_run "$t" &
done
wait
tsan_failed=0
for t in "${TSAN_TARGETS[@]}"; do
  rc=$(cat "build-tsan/$t.rc" 2>/dev/null || echo missing)
  if [ "$rc" = 0 ]; then
    echo "   $t: $(grep -E '^\[==========\]' "build-tsan/$t.log" | tail -1)"
  else
    tsan_failed=1
    echo "   $t FAILED (exit $rc) under ThreadSanitizer:"
    sed 's/^/     /' "build-tsan/$t.log"
  fi
done
[ "$tsan_failed" = 0 ]
stamp "aarch64: cross-build, engine tests under qemu-aarch64 -cpu cortex-a72 (NEON) and neoverse-n1 (dot product), default model vs x86-64 (docs/ARM.md; skips visibly without the cross compiler or qemu)"
time bash scripts/cross_arm64.sh --ci
stamp "all tests passed"
