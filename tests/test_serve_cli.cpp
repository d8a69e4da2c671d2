// `ubatch serve` start-up options, end to end through the binary: the token budget must hold
// one decode token per parallel sequence (raised to --n-parallel when not given, an error
// when given smaller), and the log states the sizes it chose. Skips, visibly, without the
// binary or the reference model.
#include <gtest/gtest.h>

#include <filesystem>

#include "support.h"

namespace ubatch {
namespace {

class ServeCli : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!std::filesystem::exists(test::ubatch_binary()))
      GTEST_SKIP() << "ubatch binary not built at " << test::ubatch_binary();
    UBATCH_REQUIRE_REFERENCE();
    model_ = test::reference_path("models/tiny-llama-q8_0.gguf");
  }
  // Runs serve on an ephemeral loopback port for at most `seconds` (then SIGINT); returns its
  // output (stdout and stderr) and exit status.
  std::string serve(const std::string& flags, int seconds, int* status) {
    return test::run_command("timeout -s INT " + std::to_string(seconds) + " " + test::ubatch_binary() +
                                 " serve --host 127.0.0.1 --port 0 -m '" + model_ + "' " + flags + " 2>&1",
                             status);
  }
  std::string model_;
};

TEST_F(ServeCli, AnExplicitBudgetBelowTheSlotsIsAClearError) {
  int status = 0;
  const std::string out = serve("--n-batch 16 --n-parallel 64", 20, &status);
  EXPECT_NE(status, 0) << out;
  EXPECT_NE(out.find("--n-batch 16 is below --n-parallel 64"), std::string::npos) << out;
  EXPECT_EQ(out.find("internal check failed"), std::string::npos) << out;
  EXPECT_EQ(out.find("listening"), std::string::npos) << out;  // refused before binding
}

TEST_F(ServeCli, TheDefaultBudgetGrowsToTheSlots) {
  int status = 0;
  const std::string out = serve("--n-parallel 200", 6, &status);
  EXPECT_NE(out.find("n_parallel 200, n_batch 200"), std::string::npos) << out;
  EXPECT_EQ(out.find("internal check failed"), std::string::npos) << out;
}

}  // namespace
}  // namespace ubatch
