// The built `ubatch serve` binary driven by the official OpenAI Python client
// (tests/python/test_openai_client.py): completions and chat, streaming and not, errors,
// API key. Also checks the binary's lifecycle: port 0 prints the bound port, /health turns
// 200 once loaded, SIGTERM exits 0. Skips visibly without python3 + `openai` or a model.
#include "test_server_fixture.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>

#include <fstream>

extern char** environ;

namespace ubatch::test {
namespace {

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

TEST(ServerOpenAiPython, OfficialClientAgainstTheBinary) {
  int rc = 0;
  run_command("python3 -c 'import openai' 2>/dev/null", &rc);
  if (rc != 0) GTEST_SKIP() << "python3 with the `openai` package not found (scripts/setup.sh installs it)";
  const std::string binary = ubatch_binary();
  if (!std::filesystem::exists(binary)) GTEST_SKIP() << "ubatch binary not built at " << binary;
  // The protocol is what is tested here: the tiny model is enough (the default model when it is absent).
  std::string model = tiny_model();
  if (!std::filesystem::exists(model)) model = default_model();
  if (!std::filesystem::exists(model)) GTEST_SKIP() << "neither the tiny model nor the default model is present";
  const std::string script = (std::filesystem::path(UBATCH_TESTS_DIR) / "python" / "test_openai_client.py").string();
  ASSERT_TRUE(std::filesystem::exists(script)) << script;

  const std::string log = (std::filesystem::temp_directory_path() /
                           ("ubatch_serve_" + std::to_string(getpid()) + ".log")).string();
  const std::string key = "test-key-" + std::to_string(getpid());
  std::vector<std::string> args = ubatch_argv({"serve", "-m", model, "--port", "0", "--api-key", key, "--n-parallel", "4",
                                                "--threads", "1", "--n-ctx", "2048", "--log-level", "info"});
  const SpawnedServer server = spawn_serve(std::move(args), log);
  ASSERT_GT(server.pid, 0) << "posix_spawn failed";
  const pid_t pid = server.pid;
  const int port = server.port;
  const bool ready = server.ready;
  std::string output;
  int status = -1;
  if (ready) {
    output = run_command("python3 " + script + " --base-url http://127.0.0.1:" + std::to_string(port) +
                             "/v1 --api-key " + key + " 2>&1",
                         &status);
  }
  kill(pid, SIGTERM);
  int wstatus = 0;
  waitpid(pid, &wstatus, 0);
  const std::string server_log = read_text(log);
  std::filesystem::remove(log);

  ASSERT_GT(port, 0) << "no 'listening on' line:\n" << server_log;
  ASSERT_TRUE(ready) << "/health never turned 200:\n" << server_log;
  EXPECT_EQ(status, 0) << output << "\nserver log:\n" << server_log;
  EXPECT_NE(output.find("10 passed, 0 failed"), std::string::npos) << output;
  EXPECT_TRUE(WIFEXITED(wstatus) && WEXITSTATUS(wstatus) == 0) << "server did not exit cleanly on SIGTERM:\n"
                                                               << server_log;
  // Prompts are not logged without --log-prompts.
  EXPECT_EQ(server_log.find("The capital of France is"), std::string::npos);
}

}  // namespace
}  // namespace ubatch::test
