// `ubatch load` against the real `ubatch serve` on the tiny reference model, on a free
// loopback port: the driver in-process (3-second closed loop, 2 users) and the command
// end to end (--json, --svg). Skips, visibly, when the model or `ubatch serve` is absent.
#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <chrono>
#include <csignal>
#include <fcntl.h>
#include <filesystem>
#include <fstream>
#include <netinet/in.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include "loadgen/load_driver.h"
#include "support.h"

extern char** environ;

namespace ubatch::bench {

using namespace ::ubatch::loadgen;
namespace {

int free_loopback_port() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return 0;
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(a);
  int port = 0;
  if (bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0 &&
      getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0)
    port = ntohs(a.sin_port);
  close(fd);
  return port;
}

std::string tail_of(const std::string& path, size_t n = 3000) {
  std::ifstream in(path);
  std::string s((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  return s.size() > n ? s.substr(s.size() - n) : s;
}

// `ubatch serve` as a child process; stopped (SIGTERM, then SIGKILL) on destruction.
class ServeProcess {
 public:
  ServeProcess(const std::string& model, int port, const std::string& log) : log_(log) {
    std::vector<std::string> args = test::ubatch_argv({"serve", "-m", model, "--host", "127.0.0.1",
                                                      "--port", std::to_string(port)});
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, STDOUT_FILENO, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_adddup2(&fa, STDOUT_FILENO, STDERR_FILENO);
    if (posix_spawn(&pid_, argv[0], &fa, nullptr, argv.data(), environ) != 0) pid_ = -1;
    posix_spawn_file_actions_destroy(&fa);
  }
  ~ServeProcess() {
    if (pid_ <= 0 || exited_) return;
    kill(pid_, SIGTERM);
    for (int i = 0; i < 100; ++i) {
      if (waitpid(pid_, nullptr, WNOHANG) == pid_) return;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
  }
  bool started() const { return pid_ > 0; }
  bool alive() {
    if (pid_ <= 0 || exited_) return false;
    if (waitpid(pid_, nullptr, WNOHANG) == pid_) exited_ = true;
    return !exited_;
  }

 private:
  pid_t pid_ = -1;
  bool exited_ = false;
  std::string log_;
};

class BenchServe : public ::testing::Test {
 protected:
  void SetUp() override {
    UBATCH_REQUIRE_REFERENCE();
    model_ = test::reference_path("models/tiny-llama-q8_0.gguf");
    if (!std::filesystem::exists(model_)) GTEST_SKIP() << "tiny model not found at " << model_;
    if (!std::filesystem::exists(test::ubatch_binary())) GTEST_SKIP() << "binary not built: " << test::ubatch_binary();
    // Without a serve subcommand, CLI11 answers "serve --help" with the top-level help and
    // status 0: require serve's own --port option in the answer.
    int status = 0;
    const std::string help = test::run_command(test::ubatch_command() + " serve --help 2>&1", &status);
    if (status != 0 || help.find("--port") == std::string::npos)
      GTEST_SKIP() << "`ubatch serve --help` failed (status " << status
                   << ", no --port option): the serve command is not available in this build";
    port_ = free_loopback_port();
    ASSERT_GT(port_, 0);
    log_ = ::testing::TempDir() + "/bench_serve_" + std::to_string(port_) + ".log";
    serve_ = std::make_unique<ServeProcess>(model_, port_, log_);
    ASSERT_TRUE(serve_->started());
    // Wait for /health == 200 (model loaded), at most 120 s.
    EndpointConfig ec;
    ec.url = url();
    ec.connect_timeout_s = 1;
    ec.timeout_s = 5;
    HttpStreamClient probe(ec);
    const auto t0 = std::chrono::steady_clock::now();
    int health = 0;
    while (std::chrono::steady_clock::now() - t0 < std::chrono::seconds(120)) {
      ASSERT_TRUE(serve_->alive()) << "ubatch serve exited; log:\n" << tail_of(log_);
      health = probe.get_status("/health");
      if (health == 200) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    ASSERT_EQ(health, 200) << "ubatch serve never became healthy; log:\n" << tail_of(log_);
  }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }

  std::string model_, log_;
  int port_ = 0;
  std::unique_ptr<ServeProcess> serve_;
};

TEST_F(BenchServe, ClosedLoopTwoUsersThreeSeconds) {
  LoadConfig c;
  c.endpoint.url = url();
  c.endpoint.timeout_s = 60;
  c.users = 2;
  c.duration_s = 3;
  Result<LoadReport> r = run_load(c, RequestMix(11, {4, 16}, {4, 8}));
  ASSERT_TRUE(r) << r.message();
  EXPECT_GT(r->n_completed, 0);
  EXPECT_EQ(r->n_errors, 0) << format_text(r.value()) << "\nserve log:\n" << tail_of(log_);
  EXPECT_GT(r->n_output_tokens, 0);
  for (const RequestResult& q : r->requests) {
    if (!q.ok) continue;
    EXPECT_GE(q.n_output_tokens, 1);
    EXPECT_LE(q.n_output_tokens, 8);
  }
}

TEST_F(BenchServe, LoadCommandWritesJsonAndSvg) {
  const std::string json_path = ::testing::TempDir() + "/bench_serve_load.json";
  const std::string svg_path = ::testing::TempDir() + "/bench_serve_load.svg";
  int status = 0;
  const std::string out = test::run_command(
      test::ubatch_command() + " load -q --url " + url() +
          " --endpoint /v1/chat/completions --users 2 --requests 4 --prompt-tokens 4:8 --max-tokens 2:4 --json " +
          json_path + " --svg " + svg_path + " 2>&1",
      &status);
  ASSERT_EQ(status, 0) << out;
  std::ifstream in(json_path);
  nlohmann::json j = nlohmann::json::parse(in, nullptr, false);
  ASSERT_FALSE(j.is_discarded());
  EXPECT_EQ(j["result"]["completed"], 4) << out;
  EXPECT_EQ(j["result"]["errors"], 0) << out;
  EXPECT_EQ(j["result"]["requests"].size(), 4u);
  std::ifstream svg(svg_path);
  std::string first;
  std::getline(svg, first);
  EXPECT_EQ(first.rfind("<?xml", 0), 0u);
  std::remove(json_path.c_str());
  std::remove(svg_path.c_str());
}

}  // namespace
}  // namespace ubatch::bench
