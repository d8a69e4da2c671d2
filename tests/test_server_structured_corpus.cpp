// The structured-output corpus (tests/data/schemas: 48 JSON Schemas; tests/data/grammars:
// arithmetic, a SQL subset, CSV lines) on the default model through the real `ubatch serve`
// binary, checked by tests/python/structured_corpus.py: every answer that ends with "stop"
// parses and validates with Python's `jsonschema`, the others end with "length"; every
// grammar answer completes and parses with an independent checker. Skips visibly without
// python3 + jsonschema or the default model.
#include "test_server_fixture.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>

#include <fstream>

extern char** environ;

namespace ubatch::test {
namespace {

std::string read_text_structured_corpus(const std::string& path) {
  std::ifstream in(path);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

TEST(ServerStructuredCorpus, SchemasAndGrammarsOnTheDefaultModel) {
  int rc = 0;
  run_command("python3 -c 'import jsonschema' 2>/dev/null", &rc);
  if (rc != 0) GTEST_SKIP() << "python3 with the `jsonschema` package not found (scripts/setup.sh installs it)";
  const std::string binary = ubatch_binary();
  if (!std::filesystem::exists(binary)) GTEST_SKIP() << "ubatch binary not built at " << binary;
  UBATCH_REQUIRE_DEFAULT_MODEL();
  // UBATCH_TESTS_DIR, not __FILE__: ccache may compile with relative paths (base_dir).
  const std::filesystem::path tests_dir = UBATCH_TESTS_DIR;
  const std::string script = (tests_dir / "python" / "structured_corpus.py").string();
  ASSERT_TRUE(std::filesystem::exists(script)) << script;

  const std::string log = (std::filesystem::temp_directory_path() /
                           ("ubatch_corpus_" + std::to_string(getpid()) + ".log")).string();
  std::vector<std::string> args = ubatch_argv({"serve", "-m", default_model(), "--port", "0", "--n-parallel", "16",
                                                "--threads", "2", "--n-ctx", "8192", "--log-level", "info", "--perf"});
  const SpawnedServer server = spawn_serve(std::move(args), log);
  ASSERT_GT(server.pid, 0) << "posix_spawn failed";
  const pid_t pid = server.pid;
  const int port = server.port;
  const bool ready = server.ready;
  std::string output;
  int status = -1;
  if (ready)
    output = run_command("python3 " + script + " --base-url http://127.0.0.1:" + std::to_string(port) + " 2>&1", &status);
  kill(pid, SIGTERM);
  int wstatus = 0;
  waitpid(pid, &wstatus, 0);
  const std::string server_log = read_text_structured_corpus(log);
  std::filesystem::remove(log);

  ASSERT_GT(port, 0) << "no 'listening on' line:\n" << server_log;
  ASSERT_TRUE(ready) << "/health never turned 200:\n" << server_log;
  EXPECT_EQ(status, 0) << output << "\nserver log (tail):\n" << server_log.substr(server_log.size() > 4000 ? server_log.size() - 4000 : 0);
  EXPECT_NE(output.find(" passed, 0 failed"), std::string::npos) << output;
  // The run is printed for the CTest log: what completed, and the server's grammar mask time.
  const size_t summary = output.find("schema answers:");
  if (summary != std::string::npos) std::printf("%s", output.substr(summary).c_str());
  const size_t masks = server_log.find("perf: grammar masks");
  if (masks != std::string::npos) std::printf("%s\n", server_log.substr(masks, server_log.find('\n', masks) - masks).c_str());
}

}  // namespace
}  // namespace ubatch::test
