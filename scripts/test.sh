#!/usr/bin/env bash
# Runs the whole test suite on a fresh machine: installs and builds (scripts/setup.sh
# --no-run), runs every test with CTest, then builds the file-parser, grammar, HTTP-transport and
# packed-kernel tests under AddressSanitizer + UBSan and the scheduler/engine/server tests under ThreadSanitizer, and
# runs them too (the Jinja engine's tests among them); then a short smoke run of every fuzz target (scripts/fuzz.sh); then the aarch64
# cross-build and its engine tests under qemu-aarch64 (scripts/cross_arm64.sh --ci).
# Tests that need ../shared/reference skip visibly where it is absent.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh --no-run

JOBS=$(nproc)
echo "== tests (Release)"
ctest --test-dir build --output-on-failure -j "$JOBS"

echo "== hostile-input (GGUF files, malformed models), chat-rendering, Jinja-engine, tokenizer-vector, grammar, HTTP-transport and packed-kernel tests under AddressSanitizer + UBSan"
cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=Debug -DUBATCH_SANITIZE=ON >/dev/null
cmake --build build-asan --target test_gguf test_gguf_hostile test_context_archs test_kernels_gemm test_tokenizer_chat test_tokenizer_segments \
  test_tokenizer_vectors test_tokenizer_wpm test_grammar_gbnf test_grammar_matcher test_grammar_json_schema \
  test_server_transport test_server_http test_server_webui \
  test_template_lexer test_template_parser test_template_values test_template_filters test_template_tests \
  test_template_statements test_template_sandbox test_template_marks test_template_chat test_template_corpus
ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  ctest --test-dir build-asan --output-on-failure -j "$JOBS" -R 'Gguf|ArchStrictLoading|Packed|ChatTemplate|ChatRules|ChatInjection|Segmented|TokenizerVectors|TokenizerWpm|WordPieceWords|GrammarGbnf|GrammarMatcher|GrammarJsonSchema|ServerTransport|ServerSse|ServerHttp|ServerUnits|ServerLifecycle|ServerWebUi\.|DashboardFeed|^Template'
echo "== scheduler, engine and server tests under ThreadSanitizer"
# The server tests run the real HTTP layer (Boost.Beast, 2 I/O threads) against the engine
# thread: transport limits, pipelining, drain, SSE streams and client disconnects. Left out
# for time (8-10 min each under TSan on 2 cores): ServerStream's 32 concurrent default-model
# streams and test_server_priority; they run in the Release suite above.
TSAN_TARGETS=(test_sched_engine test_sched_scheduler test_sched_preemption test_sched_deadlines test_sched_live_view
              test_server_transport test_server_http test_server_health test_server_openapi test_server_stream
              test_server_webui)
declare -A TSAN_FILTER=([test_server_stream]='ServerDisconnect.*:ServerStream.StopStrings*')
cmake -S . -B build-tsan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DUBATCH_TSAN=ON >/dev/null
cmake --build build-tsan --target "${TSAN_TARGETS[@]}"
# halt_on_error: any report fails the test that produced it.
for t in "${TSAN_TARGETS[@]}"; do
  TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1" "build-tsan/tests/$t" --gtest_brief=1 \
    --gtest_filter="${TSAN_FILTER[$t]:-*}"
done
echo "== fuzz smoke: every libFuzzer target for 20 s (docs/FUZZING.md; skips visibly without clang)"
bash scripts/fuzz.sh --seconds 20
echo "== aarch64: cross-build, engine tests under qemu-aarch64 -cpu cortex-a72 (NEON) and neoverse-n1 (dot product), default model vs x86-64 (docs/ARM.md; skips visibly without the cross compiler or qemu)"
time bash scripts/cross_arm64.sh --ci
echo "== all tests passed"
