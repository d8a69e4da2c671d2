// `ubatch serve` start-up options, end to end through the binary: the token budget must hold
// one decode token per parallel sequence (raised to --n-parallel when not given, an error
// when given smaller), and the log states the sizes it chose. Skips, visibly, without the
// binary or the reference model.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <future>
#include <regex>
#include <thread>

#include <nlohmann/json.hpp>

#include "gguf/gguf.h"
#include "gguf/gguf_writer.h"
#include "loadgen/http_client.h"
#include "support.h"

extern char** environ;

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
    return test::run_command("timeout -s INT " + std::to_string(seconds) + " " + test::ubatch_command() +
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

// `ubatch serve` as a child process on an ephemeral port (read from its log). Killed on
// destruction if still running.
class ServeChild {
 public:
  ServeChild(const std::string& model, const std::vector<std::string>& flags) {
    log_ = (std::filesystem::temp_directory_path() / ("ubatch_serve_cli_" + std::to_string(getpid()) + "_" +
                                                      std::to_string(counter_++) + ".log")).string();
    std::vector<std::string> args = test::ubatch_argv({"serve", "-m", model, "--host", "127.0.0.1", "--port", "0",
                                                      "--threads", "1", "--n-parallel", "4"});
    args.insert(args.end(), flags.begin(), flags.end());
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addopen(&actions, 2, log_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0);
    if (posix_spawn(&pid_, argv[0], &actions, nullptr, argv.data(), environ) != 0) pid_ = -1;
    posix_spawn_file_actions_destroy(&actions);
    static const std::regex listening(R"(listening on http://127\.0\.0\.1:(\d+))");
    for (int i = 0; i < 600 && pid_ > 0 && port_ < 0; ++i) {
      std::smatch m;
      const std::string text = log();
      if (std::regex_search(text, m, listening))
        port_ = std::stoi(m[1]);
      else
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    for (int i = 0; i < 600 && port_ > 0 && get("/health").status != 200; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  ~ServeChild() {
    if (pid_ > 0 && !exited_) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
    std::filesystem::remove(log_);
  }
  int port() const { return port_; }
  pid_t pid() const { return pid_; }
  std::string log() const {
    std::ifstream in(log_);
    return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  }
  loadgen::HttpClient client() const {
    loadgen::HttpClientOptions o;
    o.port = port_;
    o.io_timeout_s = 300;
    return loadgen::HttpClient(o);
  }
  loadgen::HttpReply get(const std::string& path) const {
    loadgen::HttpReply r;
    client().request("GET", path, {}, "", r);
    return r;
  }
  // Waits up to `seconds` for the process to exit; its status, or -1 if it did not.
  int wait_exit(double seconds) {
    const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000));
    while (std::chrono::steady_clock::now() < until) {
      int status = 0;
      if (waitpid(pid_, &status, WNOHANG) == pid_) {
        exited_ = true;
        return status;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return -1;
  }

 private:
  static inline int counter_ = 0;
  std::string log_;
  pid_t pid_ = -1;
  int port_ = -1;
  bool exited_ = false;
};

// A streamed completion on its own thread; `frames` counts the events as they arrive.
struct BackgroundStream {
  std::atomic<int> frames{0};
  std::future<std::string> body;
  BackgroundStream(const ServeChild& serve, int max_tokens) {
    const int port = serve.port();
    body = std::async(std::launch::async, [this, port, max_tokens] {
      loadgen::HttpClientOptions o;
      o.port = port;
      o.io_timeout_s = 300;
      loadgen::HttpClient c(o);
      const std::string req = nlohmann::json{{"prompt", "a"}, {"max_tokens", max_tokens}, {"ignore_eos", true},
                                             {"temperature", 0}, {"stream", true}}.dump();
      loadgen::HttpReply reply;
      std::string got;
      c.request("POST", "/v1/completions", {{"Content-Type", "application/json"}}, req, reply, {},
                [&](std::string_view bytes) {
                  got.append(bytes);
                  size_t n = 0;
                  for (size_t p = got.find("data: "); p != std::string::npos; p = got.find("data: ", p + 1)) ++n;
                  frames = static_cast<int>(n);
                  return true;
                });
      return got;
    });
  }
  bool wait_frames(int n, double seconds = 120) {
    for (int i = 0; i < seconds * 20 && frames < n; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(50));
    return frames >= n;
  }
};

// A file whose header reads as a model (architecture, sizes) but that cannot be loaded (its
// output norm is missing): the probe at start-up passes, the load fails. Written to `path`.
void write_unloadable_model(const std::string& from, const std::string& path) {
  Result<std::unique_ptr<gguf::File>> f = gguf::File::open(from);
  ASSERT_TRUE(f) << f.message();
  gguf::Writer w((*f)->version());
  for (const gguf::MetadataEntry& e : (*f)->metadata()) w.add_value(e.key, e.value);
  for (const gguf::TensorInfo& t : (*f)->tensors()) {
    if (t.name == "output_norm.weight") continue;
    const auto* p = static_cast<const uint8_t*>(t.data);
    w.add_tensor(t.name, t.type, std::vector<int64_t>(t.ne, t.ne + t.n_dims), std::vector<uint8_t>(p, p + t.n_bytes));
  }
  const std::vector<uint8_t> bytes = w.bytes();
  std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(bytes.data()),
                                              static_cast<std::streamsize>(bytes.size()));
}

// When no -m model can ever load, serve exits non-zero with the reason instead of answering
// /health 200 with nothing to serve (issue 31).
TEST_F(ServeCli, ExitsNonZeroWhenNoModelCanLoad) {
  const std::string path = (std::filesystem::temp_directory_path() /
                            ("ubatch_unloadable_" + std::to_string(getpid()) + ".gguf")).string();
  write_unloadable_model(model_, path);
  int status = 0;
  const std::string out = test::run_command("timeout -s INT 60 " + test::ubatch_command() +
                                                " serve --host 127.0.0.1 --port 0 --threads 1 -m '" + path + "' 2>&1",
                                            &status);
  std::filesystem::remove(path);
  EXPECT_NE(status, 0) << out;
  EXPECT_NE(status, 124) << "serve kept running with no model:\n" << out;  // timeout's status
  EXPECT_NE(out.find("no model can serve"), std::string::npos) << out;
  EXPECT_EQ(out.find("ready:"), std::string::npos) << out;
}

// --models-dir follows symbolic links to regular files (named by the link) and says where they
// point; a link to something that is not a GGUF is skipped with a warning that shows none of
// its bytes, and start-up goes on (issue 31: start-up stopped, printing the target's first
// bytes).
TEST_F(ServeCli, ModelsDirFollowsLinksAndNeverShowsAForeignFile) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("ubatch_models_dir_" + std::to_string(getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  const fs::path secret = dir / "secret.txt";
  std::ofstream(secret) << "SECRET=hunter2 not a model\n";
  fs::create_symlink(model_, dir / "linked.gguf");
  fs::create_symlink(secret, dir / "notes.gguf");
  fs::create_symlink(dir / "missing", dir / "dangling.gguf");
  {
    ServeChild serve(model_, {"--models-dir", dir.string()});
    const std::string log = serve.log();
    ASSERT_GT(serve.port(), 0) << log;
    EXPECT_NE(log.find("linked.gguf is a symbolic link to"), std::string::npos) << log;
    EXPECT_NE(log.find("skipping " + (dir / "notes.gguf").string()), std::string::npos) << log;
    EXPECT_NE(log.find("skipping " + (dir / "dangling.gguf").string()), std::string::npos) << log;
    for (const char* leak : {"SECRET", "hunter2", "53 45 43"}) EXPECT_EQ(log.find(leak), std::string::npos) << log;
    const loadgen::HttpReply models = serve.get("/v1/models");
    EXPECT_NE(models.body.find("\"linked\""), std::string::npos) << models.body;
    EXPECT_EQ(models.body.find("\"notes\""), std::string::npos) << models.body;
  }
  fs::remove_all(dir);
}

// The default model: slow enough (tens of ms per token) that a stream is still running when
// the signal comes.
TEST_F(ServeCli, SigtermDrainsRunningRequestsThenExitsZero) {
  UBATCH_REQUIRE_DEFAULT_MODEL();
  ServeChild serve(test::default_model(), {"--shutdown-timeout", "300"});
  ASSERT_GT(serve.port(), 0) << serve.log();
  BackgroundStream stream(serve, 120);
  ASSERT_TRUE(stream.wait_frames(2)) << serve.log();
  ASSERT_EQ(kill(serve.pid(), SIGTERM), 0);
  // Health turns 503 "draining" (a balancer takes the server out) while the stream runs on.
  loadgen::HttpReply h;
  for (int i = 0; i < 600 && h.status != 503; ++i) {
    h = serve.get("/health");
    if (h.status != 503) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_EQ(h.status, 503) << serve.log();
  EXPECT_EQ(nlohmann::json::parse(h.body, nullptr, false)["status"], "draining") << h.body;
  const std::string body = stream.body.get();
  EXPECT_GE(body.size(), 14u);
  EXPECT_EQ(body.substr(body.size() - 14), "data: [DONE]\n\n") << body.substr(body.size() > 300 ? body.size() - 300 : 0);
  EXPECT_EQ(body.find("shutting_down"), std::string::npos);
  const int status = serve.wait_exit(120);
  ASSERT_NE(status, -1) << "serve did not exit after draining; log:\n" << serve.log();
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status << "\n" << serve.log();
  EXPECT_NE(serve.log().find("draining"), std::string::npos) << serve.log();
}

TEST_F(ServeCli, TheShutdownTimeoutCancelsWhatIsStillRunning) {
  UBATCH_REQUIRE_DEFAULT_MODEL();
  ServeChild serve(test::default_model(), {"--shutdown-timeout", "0.2"});
  ASSERT_GT(serve.port(), 0) << serve.log();
  BackgroundStream stream(serve, 1900);
  ASSERT_TRUE(stream.wait_frames(2)) << serve.log();
  ASSERT_EQ(kill(serve.pid(), SIGTERM), 0);
  const std::string body = stream.body.get();
  // The last events: the shutdown error, then [DONE].
  ASSERT_GE(body.size(), 14u);
  EXPECT_EQ(body.substr(body.size() - 14), "data: [DONE]\n\n");
  EXPECT_NE(body.find("\"code\":\"shutting_down\""), std::string::npos) << body.substr(body.size() > 400 ? body.size() - 400 : 0);
  const int status = serve.wait_exit(60);
  ASSERT_NE(status, -1) << "serve did not exit; log:\n" << serve.log();
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status << "\n" << serve.log();
}

}  // namespace
}  // namespace ubatch
