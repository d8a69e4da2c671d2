// Helpers shared by the tests: where the reference data and the default model are, and
// reading small binary files.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace ubatch::test {

// ../shared beside the source tree (UBATCH_SHARED_DIR overrides).
std::string shared_dir();
// shared_dir() + "/reference/" + rel.
std::string reference_path(const std::string& rel);
bool have_reference();
// The embedded default model (Gemma 3 270M Q4_K_M) and the built `ubatch` binary.
std::string default_model();
// The chat model scripts/setup.sh installs beside it (SmolLM2-135M-Instruct Q4_1);
// UBATCH_SMOLLM2_MODEL overrides the path.
std::string smollm2_model();
std::string ubatch_binary();
// The shell words that run the binary: ubatch_binary(), preceded in a cross build by the
// emulator CMake runs the tests with (e.g. "qemu-aarch64 -L /usr/aarch64-linux-gnu"; the
// environment, QEMU_CPU included, passes through to it).
std::string ubatch_command();
// True in a cross build, whose tests run under that emulator (no re-exec of a test binary by
// itself there: gtest's "threadsafe" death tests cannot run, the "fast" ones can).
bool emulated();
// The argv that starts the built ubatch with `args` (for posix_spawn/execv): the emulator's
// words, then ubatch_binary(), then args.
std::vector<std::string> ubatch_argv(const std::vector<std::string>& args);

std::vector<uint8_t> read_file(const std::string& path);
std::vector<float> read_f32(const std::string& path);

// Runs a shell command, returns its stdout; exit status in *status when given.
std::string run_command(const std::string& cmd, int* status = nullptr);

}  // namespace ubatch::test

// Skips the current test, visibly, when the reference data is not there.
#define UBATCH_REQUIRE_REFERENCE()                                                       \
  do {                                                                                   \
    if (!::ubatch::test::have_reference())                                               \
      GTEST_SKIP() << "reference data not found at " << ::ubatch::test::shared_dir();    \
  } while (0)
#define UBATCH_REQUIRE_DEFAULT_MODEL()                                                   \
  do {                                                                                   \
    if (!std::filesystem::exists(::ubatch::test::default_model()))                       \
      GTEST_SKIP() << "default model not installed at " << ::ubatch::test::default_model() \
                   << " (run scripts/setup.sh)";                                         \
  } while (0)
