// The agents' APIs through the official Python clients (tests/python/test_agents_clients.py)
// against the built `ubatch serve` on the embedded chat model, SmolLM2-135M-Instruct: the
// `openai` client's Responses (plain, streamed, tools round trip, text.format) and the
// `anthropic` client's Messages (plain, streamed, tools round trip with tool_result,
// count_tokens, an error). Skips visibly without python3 and both packages, the binary or the
// model; with one package, the other's checks are skipped (printed).
#include "test_server_fixture.h"

#include <signal.h>
#include <sys/wait.h>

#include <fstream>

namespace ubatch::test {
namespace {

std::string agents_read_text(const std::string& path) {
  std::ifstream in(path);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

TEST(ServerAgentsPython, OfficialOpenAiAndAnthropicClients) {
  int has_openai = 0, has_anthropic = 0;
  run_command("python3 -c 'import openai' 2>/dev/null", &has_openai);
  run_command("python3 -c 'import anthropic' 2>/dev/null", &has_anthropic);
  if (has_openai != 0 && has_anthropic != 0)
    GTEST_SKIP() << "python3 with the `openai` or `anthropic` package not found (scripts/setup.sh installs them)";
  const std::string binary = ubatch_binary();
  if (!std::filesystem::exists(binary)) GTEST_SKIP() << "ubatch binary not built at " << binary;
  const std::string model = ::ubatch::test::smollm2_model();
  if (!std::filesystem::exists(model)) GTEST_SKIP() << "no SmolLM2-135M-Instruct GGUF at " << model;
  const std::string script = (std::filesystem::path(UBATCH_TESTS_DIR) / "python" / "test_agents_clients.py").string();
  ASSERT_TRUE(std::filesystem::exists(script)) << script;
  const std::string log =
      (std::filesystem::temp_directory_path() / ("ubatch_agents_" + std::to_string(getpid()) + ".log")).string();
  const std::string key = "agents-key-" + std::to_string(getpid());
  std::vector<std::string> args = ubatch_argv({"serve", "-m", model, "--port", "0", "--api-key", key, "--n-parallel",
                                               "4", "--threads", "2", "--n-ctx", "2048", "--log-level", "info"});
  const SpawnedServer server = spawn_serve(std::move(args), log);
  ASSERT_GT(server.pid, 0) << "posix_spawn failed";
  std::string output;
  int status = -1;
  if (server.ready)
    output = run_command("python3 " + script + " --base-url http://127.0.0.1:" + std::to_string(server.port) +
                             " --api-key " + key + " 2>&1",
                         &status);
  kill(server.pid, SIGTERM);
  int wstatus = 0;
  waitpid(server.pid, &wstatus, 0);
  const std::string server_log = agents_read_text(log);
  std::filesystem::remove(log);
  ASSERT_TRUE(server.ready) << "/health never turned 200:\n" << server_log;
  EXPECT_EQ(status, 0) << output << "\nserver log (tail):\n"
                       << server_log.substr(server_log.size() > 20000 ? server_log.size() - 20000 : 0);
  const int want = (has_openai == 0 ? 4 : 0) + (has_anthropic == 0 ? 5 : 0);
  EXPECT_NE(output.find(std::to_string(want) + " passed, 0 failed"), std::string::npos) << output;
  std::printf("%s", output.c_str());
  if (has_openai != 0 || has_anthropic != 0)
    GTEST_SKIP() << "ran only the " << (has_openai == 0 ? "openai" : "anthropic") << " checks: " << output;
}

}  // namespace
}  // namespace ubatch::test
