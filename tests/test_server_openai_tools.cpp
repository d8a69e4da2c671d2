// Tool calling through the official OpenAI Python client (tests/python/test_openai_tools.py)
// against the built `ubatch serve`: a round trip streamed and not, schema-valid arguments on
// every one of 50 sampled requests under tool_choice "required" and a named function, 20 of 20
// "required" and 10 of 10 named requests under OpenAI's defaults (parallel_tool_calls unset)
// ending with their calls, streamed and not, a greedy reply that repeats its call ending at the
// repeat, calls kept when max_tokens cuts a later one, parallel calls, auto, /apply-template, errors — on the default model (no template: the
// gemma family) and, where models/ has it, SmolLM2-135M-Instruct (its own Jinja template,
// which renders no tools). Skips visibly without python3 + `openai` + `jsonschema`, the
// binary or the model.
#include "test_server_fixture.h"

#include <signal.h>
#include <sys/wait.h>

#include <cctype>
#include <fstream>

namespace ubatch::test {
namespace {

std::string read_text_openai_tools(const std::string& path) {
  std::ifstream in(path);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// models/*SmolLM2*Instruct*.gguf (any case), "" when there is none.
std::string smollm2_model() {
  const std::filesystem::path dir = std::filesystem::path(default_model()).parent_path();
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
    std::string name = e.path().filename().string();
    for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    if (name.find("smollm2") != std::string::npos && name.find("instruct") != std::string::npos &&
        name.size() > 5 && name.substr(name.size() - 5) == ".gguf")
      return e.path().string();
  }
  return "";
}

void run_tool_suite(const std::string& model) {
  int rc = 0;
  run_command("python3 -c 'import openai, jsonschema' 2>/dev/null", &rc);
  if (rc != 0) GTEST_SKIP() << "python3 with `openai` and `jsonschema` not found (scripts/setup.sh installs them)";
  const std::string binary = ubatch_binary();
  if (!std::filesystem::exists(binary)) GTEST_SKIP() << "ubatch binary not built at " << binary;
  const std::string script = (std::filesystem::path(UBATCH_TESTS_DIR) / "python" / "test_openai_tools.py").string();
  ASSERT_TRUE(std::filesystem::exists(script)) << script;
  const std::string log =
      (std::filesystem::temp_directory_path() / ("ubatch_tools_" + std::to_string(getpid()) + ".log")).string();
  std::vector<std::string> args = ubatch_argv({"serve", "-m", model, "--port", "0", "--n-parallel", "16",
                                               "--threads", "2", "--n-ctx", "8192", "--log-level", "info"});
  const SpawnedServer server = spawn_serve(std::move(args), log);
  ASSERT_GT(server.pid, 0) << "posix_spawn failed";
  std::string output;
  int status = -1;
  if (server.ready)
    output = run_command(
        "python3 " + script + " --base-url http://127.0.0.1:" + std::to_string(server.port) + "/v1 --samples 50 2>&1",
        &status);
  kill(server.pid, SIGTERM);
  int wstatus = 0;
  waitpid(server.pid, &wstatus, 0);
  const std::string server_log = read_text_openai_tools(log);
  std::filesystem::remove(log);
  ASSERT_TRUE(server.ready) << "/health never turned 200:\n" << server_log;
  EXPECT_EQ(status, 0) << output << "\nserver log (tail):\n"
                       << server_log.substr(server_log.size() > 20000 ? server_log.size() - 20000 : 0);
  EXPECT_NE(output.find("11 passed, 0 failed"), std::string::npos) << output;
  std::printf("%s", output.c_str());  // per-check times
}

TEST(ServerOpenAiTools, OfficialClientToolCallingDefaultModel) {
  UBATCH_REQUIRE_DEFAULT_MODEL();
  run_tool_suite(default_model());
}

TEST(ServerOpenAiTools, OfficialClientToolCallingSmolLM2) {
  const std::string model = smollm2_model();
  if (model.empty())
    GTEST_SKIP() << "no SmolLM2-135M-Instruct GGUF in " << std::filesystem::path(default_model()).parent_path();
  run_tool_suite(model);
}

}  // namespace
}  // namespace ubatch::test
