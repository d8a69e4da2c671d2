// The web page in a real browser: starts the built `ubatch serve` (default model, API key) and
// runs tests/python/test_webui_browser.py, which drives headless Chromium through Selenium
// and chromedriver: the page loads without console errors, a chat reply streams in, Stop
// cancels a long reply, the dashboard moves under `ubatch load --users 64` (both decode and
// prefill in the batch chart), a screenshot is written. Skips visibly without python3 +
// selenium, Chromium + chromedriver (scripts/setup.sh installs them where it can), or a model.
// UBATCH_WEBUI_SCREENSHOT=path keeps the screenshot (docs/dashboard.png is made this way).
#include "test_server_fixture.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>

#include <fstream>

extern char** environ;

namespace ubatch::test {
namespace {

std::string read_text_webui_browser(const std::string& path) {
  std::ifstream in(path);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

std::string env_or(const char* name, const std::string& fallback) {
  const char* v = std::getenv(name);
  return v && *v ? v : fallback;
}

TEST(ServerWebUiBrowser, PlaygroundAndDashboardInHeadlessChromium) {
  int rc = 0;
  run_command("python3 -c 'import selenium' 2>/dev/null", &rc);
  if (rc != 0) GTEST_SKIP() << "python3 with the `selenium` package not found (scripts/setup.sh installs it)";
  const std::string chromium = env_or("UBATCH_CHROMIUM", "/usr/bin/chromium");
  const std::string chromedriver = env_or("UBATCH_CHROMEDRIVER", "/usr/bin/chromedriver");
  if (!std::filesystem::exists(chromium) || !std::filesystem::exists(chromedriver))
    GTEST_SKIP() << "no Chromium browser (" << chromium << ") or chromedriver (" << chromedriver
                 << "): Debian packages chromium and chromium-driver, installed by scripts/setup.sh where it can";
  const std::string binary = ubatch_binary();
  if (!std::filesystem::exists(binary)) GTEST_SKIP() << "ubatch binary not built at " << binary;
  // The default model makes the dashboard look like real use (and the README screenshot);
  // the tiny model is enough for the checks.
  std::string model = default_model();
  if (!std::filesystem::exists(model)) model = tiny_model();
  if (!std::filesystem::exists(model)) GTEST_SKIP() << "neither the default model nor the tiny model is present";
  const std::string script = (std::filesystem::path(UBATCH_TESTS_DIR) / "python" / "test_webui_browser.py").string();
  ASSERT_TRUE(std::filesystem::exists(script)) << script;

  const std::string tmp = std::filesystem::temp_directory_path().string();
  const std::string tag = std::to_string(getpid());
  const std::string log = tmp + "/ubatch_webui_serve_" + tag + ".log";
  const std::string keep = env_or("UBATCH_WEBUI_SCREENSHOT", "");
  const std::string screenshot = keep.empty() ? tmp + "/ubatch_webui_" + tag + ".png" : keep;
  const std::string key = "webui-key-" + tag;
  std::vector<std::string> args = ubatch_argv({"serve", "-m", model, "--port", "0", "--api-key", key, "--log-level", "info"});
  const SpawnedServer server = spawn_serve(std::move(args), log);
  ASSERT_GT(server.pid, 0) << "posix_spawn failed";
  const pid_t pid = server.pid;
  const int port = server.port;
  const bool ready = server.ready;
  std::string output;
  int status = -1;
  if (ready) {
    output = run_command("python3 " + script + " --base-url http://127.0.0.1:" + std::to_string(port) + " --api-key " +
                             key + " --ubatch " + binary + " --screenshot " + screenshot + " --chromium " + chromium +
                             " --chromedriver " + chromedriver + " 2>&1",
                         &status);
  }
  kill(pid, SIGTERM);
  int wstatus = 0;
  waitpid(pid, &wstatus, 0);
  const std::string server_log = read_text_webui_browser(log);
  std::filesystem::remove(log);
  if (keep.empty()) std::filesystem::remove(screenshot);

  ASSERT_GT(port, 0) << "no 'listening on' line:\n" << server_log;
  ASSERT_TRUE(ready) << "/health never turned 200:\n" << server_log;
  std::cout << output;
  EXPECT_EQ(status, 0) << output << "\nserver log:\n" << server_log;
  EXPECT_NE(output.find("7 passed, 0 failed"), std::string::npos) << output;
  EXPECT_TRUE(WIFEXITED(wstatus) && WEXITSTATUS(wstatus) == 0) << "server did not exit cleanly on SIGTERM:\n"
                                                               << server_log;
}

}  // namespace
}  // namespace ubatch::test
