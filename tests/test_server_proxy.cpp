// `ubatch serve` (default model) behind the proxies users put in front of it, started by the
// test on loopback from their Debian packages (issue 26):
//  - nginx (nginx-light) with a bare `proxy_pass` — nginx then speaks HTTP/1.0 upstream, so
//    streams are delimited by the connection's close — and with deploy/nginx/ubatch.conf:
//    completions and chat, streamed and not, arrive whole, with the text of a direct request;
//  - HAProxy with a 1 s `timeout server`: a stream queued 2 s behind a long request and a
//    stream whose prompt takes about 2.5 s to prefill both complete, kept alive by `: keep-alive`
//    comments (--stream-keepalive); with keep-alive off the same queued stream gets HAProxy's
//    504, which shows what the comments are for;
// and, directly, a stream whose deadline passes after its head went out: an error event (the
// object a non-streamed request gets with its 504), then [DONE].
// Without nginx or haproxy (scripts/setup.sh installs both, optionally) their tests skip,
// saying so; without the default model every test skips.
#include "test_server_fixture.h"

#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include <algorithm>
#include <future>

namespace ubatch::test {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// The first executable `name` on PATH or in the sbin directories (where Debian puts nginx and
// haproxy, often off a user's PATH); "" when none.
std::string find_program(const std::string& name) {
  std::string path = std::getenv("PATH") ? std::getenv("PATH") : "";
  path += ":/usr/sbin:/usr/local/sbin:/sbin";
  std::istringstream in(path);
  for (std::string dir; std::getline(in, dir, ':');) {
    const std::string p = dir + "/" + name;
    if (!dir.empty() && access(p.c_str(), X_OK) == 0) return p;
  }
  return "";
}

// A port free now on 127.0.0.1 (for a proxy's listener; the kernel picks it).
int free_port() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  int port = -1;
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0)
    port = ntohs(addr.sin_port);
  ::close(fd);
  return port;
}

std::string read_text_proxy(const std::string& path) {
  std::ifstream in(path);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// A proxy process started by a test in its own directory; stopped (SIGTERM, then SIGKILL) and
// its directory removed with the object.
class ProxyProcess {
 public:
  ProxyProcess() {
    char tmpl[] = "/tmp/ubatch-proxy-XXXXXX";
    dir_ = mkdtemp(tmpl) ? tmpl : "";
    // nginx started by root runs its workers as `nobody`: they must reach the temp paths.
    if (!dir_.empty()) chmod(dir_.c_str(), 0755);
  }
  ~ProxyProcess() {
    stop();
    if (!dir_.empty()) std::filesystem::remove_all(dir_);
  }
  const std::string& dir() const { return dir_; }
  std::string log() const { return read_text_proxy(dir_ + "/proxy.log") + read_text_proxy(dir_ + "/error.log"); }

  // Starts argv (stdout and stderr to proxy.log) and waits until `port` accepts connections.
  bool start(std::vector<std::string> argv, int port) {
    std::vector<char*> args;
    for (std::string& a : argv) args.push_back(a.data());
    args.push_back(nullptr);
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    const std::string log = dir_ + "/proxy.log";
    posix_spawn_file_actions_addopen(&actions, 1, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_adddup2(&actions, 1, 2);
    const int rc = posix_spawn(&pid_, args[0], &actions, nullptr, args.data(), environ);
    posix_spawn_file_actions_destroy(&actions);
    if (rc != 0) {
      pid_ = -1;
      return false;
    }
    for (int i = 0; i < 200; ++i) {  // 10 s
      if (RawConnection(port).ok()) return true;
      int status = 0;
      if (waitpid(pid_, &status, WNOHANG) == pid_) {  // it exited: a bad configuration
        pid_ = -1;
        return false;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return false;
  }

  void stop() {
    if (pid_ <= 0) return;
    kill(pid_, SIGTERM);
    for (int i = 0; i < 100; ++i) {
      if (waitpid(pid_, nullptr, WNOHANG) == pid_) {
        pid_ = -1;
        return;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
    pid_ = -1;
  }

 private:
  std::string dir_;
  pid_t pid_ = -1;
};

// nginx's main configuration around an `http {}` body: foreground, one worker, every path in
// the test's directory.
std::string nginx_conf(const std::string& dir, const std::string& http_body) {
  std::string c = "daemon off;\nworker_processes 1;\npid " + dir + "/nginx.pid;\nerror_log " + dir + "/error.log info;\n";
  c += "events { worker_connections 128; }\nhttp {\n  access_log " + dir + "/access.log;\n";
  for (const char* t : {"client_body", "proxy", "fastcgi", "uwsgi", "scgi"})
    c += "  " + std::string(t) + "_temp_path " + dir + "/" + t + ";\n";
  return c + http_body + "}\n";
}

bool start_nginx(ProxyProcess& p, const std::string& nginx, const std::string& http_body, int port) {
  const std::string conf = p.dir() + "/nginx.conf";
  std::ofstream(conf) << nginx_conf(p.dir(), http_body);
  return p.start({nginx, "-p", p.dir(), "-c", conf, "-e", p.dir() + "/error.log"}, port);
}

// The default model served with one slot (so that one long request queues the next), stream
// keep-alive every 0.25 s, room for long prompts.
std::unique_ptr<ServedModel> serve_default(double keepalive_s) {
  ServeOptions o;
  o.engine.n_parallel = 1;
  o.engine.n_batch = 512;
  o.n_ctx = 8192;
  o.n_threads = 2;
  o.server.stream_keepalive_s = keepalive_s;
  return serve_model(default_model(), o);
}

const json kProxyCompletion = {{"prompt", "The capital of France is"}, {"max_tokens", 8}, {"temperature", 0}};
const json kChat = {{"messages", json::array({{{"role", "user"}, {"content", "Say hello in French."}}})},
                    {"max_tokens", 8},
                    {"temperature", 0}};

std::string text_of(const json& response) {
  const json& c = response["choices"][0];
  return c.contains("message") ? c["message"]["content"].get<std::string>() : c["text"].get<std::string>();
}

// Completions and chat through the proxy on `proxy_port`, streamed and not: each arrives
// whole — a 200, the text of the same request sent to the server directly, and a stream's
// every frame up to [DONE].
void expect_whole_through(int proxy_port, int direct_port) {
  for (const auto& [path, body] : {std::pair{"/v1/completions", kProxyCompletion}, std::pair{"/v1/chat/completions", kChat}}) {
    SCOPED_TRACE(path);
    Reply direct = post(direct_port, path, body.dump());
    ASSERT_EQ(direct.status, 200) << direct.body;
    const std::string expected = text_of(direct.parsed());
    ASSERT_FALSE(expected.empty());
    Reply whole = post(proxy_port, path, body.dump());
    ASSERT_EQ(whole.status, 200) << whole.body;
    ASSERT_EQ(whole.headers.count("Content-Length"), 1u);
    EXPECT_EQ(std::stoul(whole.headers.find("Content-Length")->second), whole.body.size());
    EXPECT_EQ(text_of(whole.parsed()), expected);
    json streamed = body;
    streamed["stream"] = true;
    StreamResult s = post_stream(proxy_port, path, streamed);
    ASSERT_EQ(s.status, 200);
    EXPECT_TRUE(s.done) << "no [DONE]: the stream was cut";
    EXPECT_EQ(s.text[0], expected);
    EXPECT_EQ(s.finish[0], "length");
  }
}

class ServerBehindProxy : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (std::filesystem::exists(default_model())) served_ = serve_default(0.25).release();
  }
  static void TearDownTestSuite() {
    delete served_;
    served_ = nullptr;
  }
  void SetUp() override {
    UBATCH_REQUIRE_DEFAULT_MODEL();
    ASSERT_NE(served_, nullptr);
  }
  static int port() { return served_->port; }
  static ServedModel* served_;
};
ServedModel* ServerBehindProxy::served_ = nullptr;

TEST_F(ServerBehindProxy, NginxDefaultProxyPassCarriesStreamsAndWholeResponses) {
  const std::string nginx = find_program("nginx");
  if (nginx.empty()) GTEST_SKIP() << "nginx not installed (scripts/setup.sh installs nginx-light)";
  ProxyProcess p;
  const int listen = free_port();
  // As most guides write it: nginx forwards with HTTP/1.0 and "Connection: close".
  const std::string server = "server {\n  listen 127.0.0.1:" + std::to_string(listen) +
                             ";\n  location / { proxy_pass http://127.0.0.1:" + std::to_string(port()) + "; }\n}\n";
  ASSERT_TRUE(start_nginx(p, nginx, server, listen)) << p.log();
  expect_whole_through(listen, port());
}

TEST_F(ServerBehindProxy, NginxWithTheDeployConfigurationCarriesThemToo) {
  const std::string nginx = find_program("nginx");
  if (nginx.empty()) GTEST_SKIP() << "nginx not installed (scripts/setup.sh installs nginx-light)";
  std::string conf = read_text_proxy(std::string(UBATCH_TESTS_DIR) + "/../deploy/nginx/ubatch.conf");
  ASSERT_FALSE(conf.empty());
  ProxyProcess p;
  const int listen = free_port();
  for (const auto& [from, to] : {std::pair<std::string, std::string>{"listen 127.0.0.1:8080;", "listen 127.0.0.1:" +
                                                                                                std::to_string(listen) + ";"},
                                 {"server 127.0.0.1:8081;", "server 127.0.0.1:" + std::to_string(port()) + ";"}}) {
    const size_t at = conf.find(from);
    ASSERT_NE(at, std::string::npos) << "deploy/nginx/ubatch.conf has no '" << from << "' to point at the test's ports";
    conf.replace(at, from.size(), to);
  }
  ASSERT_TRUE(start_nginx(p, nginx, conf, listen)) << p.log();
  expect_whole_through(listen, port());
}

// A POST on its own connection whose body is collected as it arrives, with the time of its
// first `data:` frame.
struct Collected {
  int status = -1;
  std::string body;
  double first_data_s = -1;  // since the request was sent; -1: none
};

Collected post_collect(int port, const std::string& path, const json& body) {
  Collected c;
  const Clock::time_point t0 = Clock::now();
  loadgen::HttpReply reply;
  client(port)->request(
      "POST", path, {{"Content-Type", "application/json"}}, body.dump(), reply,
      [&](const loadgen::HttpReply& head) { c.status = head.status; },
      [&](std::string_view bytes) {
        c.body.append(bytes);
        if (c.first_data_s < 0 && c.body.find("data: ") != std::string::npos) c.first_data_s = seconds_since(t0);
        return true;
      });
  return c;
}

// HAProxy with two frontends and a 1 s `timeout server`: `keepalive` to the suite's server,
// `silent` to `silent_port` (a server with keep-alive off).
constexpr double kServerTimeoutS = 1.0;

bool start_haproxy(ProxyProcess& p, const std::string& haproxy, int keepalive_listen, int upstream, int silent_listen,
                   int silent_upstream) {
  const std::string cfg = p.dir() + "/haproxy.cfg";
  std::ofstream(cfg) << "global\n    maxconn 256\n"
                     << "defaults\n    mode http\n    timeout connect 2s\n    timeout client 60s\n"
                     << "    timeout server " << static_cast<int>(kServerTimeoutS * 1000) << "ms\n"
                     << "frontend keepalive\n    bind 127.0.0.1:" << keepalive_listen << "\n    default_backend keepalive\n"
                     << "frontend silent\n    bind 127.0.0.1:" << silent_listen << "\n    default_backend silent\n"
                     << "backend keepalive\n    server s 127.0.0.1:" << upstream << "\n"
                     << "backend silent\n    server s 127.0.0.1:" << silent_upstream << "\n";
  return p.start({haproxy, "-db", "-f", cfg}, keepalive_listen) && RawConnection(silent_listen).ok();
}

// A long non-streamed request sent directly, holding the server's only slot until `release()`
// (closing its connection cancels it).
struct Blocker {
  explicit Blocker(int port) : conn(port) {
    EXPECT_TRUE(conn.send_post("/v1/completions", json{{"prompt", "Count to a thousand:"},
                                                       {"max_tokens", 4000},
                                                       {"ignore_eos", true},
                                                       {"temperature", 0}}
                                                      .dump()));
    wait_metrics(port, [](std::map<std::string, double>& m) { return m["ubatch_requests_running"] == 1; });
  }
  void release() { conn.close(); }
  RawConnection conn;
};

TEST_F(ServerBehindProxy, HaproxyShortServerTimeoutAStreamQueuedBehindALongRequestCompletes) {
  const std::string haproxy = find_program("haproxy");
  if (haproxy.empty()) GTEST_SKIP() << "haproxy not installed (scripts/setup.sh installs it)";
  std::unique_ptr<ServedModel> silent = serve_default(0);  // --stream-keepalive 0
  ASSERT_NE(silent, nullptr);
  ProxyProcess p;
  const int ka = free_port(), off = free_port();
  ASSERT_TRUE(start_haproxy(p, haproxy, ka, port(), off, silent->port)) << p.log();
  json body = kProxyCompletion;
  body["stream"] = true;

  for (const bool keepalive : {true, false}) {
    SCOPED_TRACE(keepalive ? "keep-alive every 0.25 s" : "keep-alive off");
    const int upstream = keepalive ? port() : silent->port;
    Blocker blocker(upstream);
    std::future<Collected> queued =
        std::async(std::launch::async, [&] { return post_collect(keepalive ? ka : off, "/v1/completions", body); });
    // Queued for twice the proxy's timeout, then the slot frees.
    std::this_thread::sleep_for(std::chrono::milliseconds(static_cast<int>(2000 * kServerTimeoutS)));
    blocker.release();
    Collected c = queued.get();
    if (keepalive) {
      ASSERT_EQ(c.status, 200) << c.body;
      int comments = 0;
      std::vector<std::string> frames = sse_payloads(c.body, &comments);
      ASSERT_FALSE(frames.empty());
      EXPECT_EQ(frames.back(), "[DONE]");
      EXPECT_GE(comments, 4);  // ≥ 2 s of queue at one per 0.25 s, with room for a slow machine
      EXPECT_GT(c.first_data_s, 2 * kServerTimeoutS);
    } else {
      // Nothing for a second: HAProxy gives up on the server (and closes its connection,
      // which cancels the request there).
      EXPECT_EQ(c.status, 504) << c.body;
    }
    wait_metrics(upstream, [](std::map<std::string, double>& m) {
      return m["ubatch_requests_running"] == 0 && m["ubatch_requests_queued"] == 0;
    });
  }
}

// A prompt of `n` token ids, distinct from others by `salt` (no cached prefix).
json id_prompt(int n, int salt) {
  json ids = json::array();
  for (int i = 0; i < n; ++i) ids.push_back(10000 + (salt * 7919 + i * 104729) % 50000);
  return ids;
}

TEST_F(ServerBehindProxy, HaproxyShortServerTimeoutAStreamWithALongPromptCompletes) {
  const std::string haproxy = find_program("haproxy");
  if (haproxy.empty()) GTEST_SKIP() << "haproxy not installed (scripts/setup.sh installs it)";
  // This machine's prefill rate now, to size a prompt that takes about 2.5 × the timeout.
  const int probe = 128;
  const Clock::time_point t0 = Clock::now();
  Reply r = post(port(), "/v1/completions", json{{"prompt", id_prompt(probe, 1)}, {"max_tokens", 1}}.dump());
  ASSERT_EQ(r.status, 200) << r.body;
  const double rate = probe / std::max(seconds_since(t0), 1e-3);
  const int n = std::clamp(static_cast<int>(rate * 2.5 * kServerTimeoutS), probe, 7900);
  std::printf("prefill %.0f tokens/s: a prompt of %d tokens\n", rate, n);

  ProxyProcess p;
  const int ka = free_port(), unused = free_port();
  ASSERT_TRUE(start_haproxy(p, haproxy, ka, port(), unused, port())) << p.log();
  Collected c =
      post_collect(ka, "/v1/completions", json{{"prompt", id_prompt(n, 2)}, {"max_tokens", 4}, {"stream", true}});
  ASSERT_EQ(c.status, 200) << c.body;
  int comments = 0;
  std::vector<std::string> frames = sse_payloads(c.body, &comments);
  ASSERT_FALSE(frames.empty());
  EXPECT_EQ(frames.back(), "[DONE]");
  std::printf("first token after %.2f s, %d keep-alive comments before it\n", c.first_data_s, comments);
  if (c.first_data_s > kServerTimeoutS) {
    EXPECT_GE(comments, 1);  // what kept HAProxy waiting
  }
}

// Queued behind a long stream until its deadline passes, after its head went out as
// keep-alive: the same error object as unstreamed (504 deadline_exceeded), as an event, then
// [DONE].
TEST_F(ServerBehindProxy, ADeadlinePassingAfterTheHeadIsAnErrorEventThenDone) {
  // The running stream may end at any token (end-of-sequence not ignored), so the admission
  // estimate cannot refuse the request behind it: it waits, and its deadline passes.
  // Long enough on any machine: no speculation (greedy text repeats, and accepted drafts ran
  // 800 tokens in 2.4 s here, before the queued request's deadline) and room for 4000 tokens;
  // closing the connection at the end cancels it.
  RawConnection running(port());
  ASSERT_TRUE(running.send_post("/v1/completions", json{{"prompt", "Once upon a time"},
                                                        {"max_tokens", 4000},
                                                        {"temperature", 0},
                                                        {"speculative", false},
                                                        {"stream", true}}
                                                       .dump()));
  const Clock::time_point s0 = Clock::now();
  running.read_until("\n\n", 2);
  running.read_until("\n\n", 6);
  const double step_ms = seconds_since(s0) * 1000 / 6;
  double deadline = std::max(1500.0, 6.0 * step_ms);  // several keep-alive intervals
  json errors[2];
  for (const bool stream : {true, false}) {
    SCOPED_TRACE(stream ? "streamed" : "not streamed");
    json body = kProxyCompletion;
    body["stream"] = stream;
    Collected c;
    // A loaded machine's step-time estimate may refuse at admission (503): a longer deadline then.
    for (int attempt = 0; attempt < 4; ++attempt) {
      body["deadline_ms"] = static_cast<int>(deadline);
      c = post_collect(port(), "/v1/completions", body);
      if (c.status != 503) break;
      deadline *= 2;
    }
    if (!stream) {
      ASSERT_EQ(c.status, 504) << c.body;
      errors[1] = json::parse(c.body)["error"];
      continue;
    }
    ASSERT_EQ(c.status, 200) << c.body;
    int comments = 0;
    std::vector<std::string> frames = sse_payloads(c.body, &comments);
    EXPECT_GE(comments, 1);
    ASSERT_EQ(frames.size(), 2u) << c.body;
    EXPECT_EQ(frames[1], "[DONE]");
    errors[0] = json::parse(frames[0])["error"];
  }
  for (const char* field : {"type", "code", "param"}) EXPECT_EQ(errors[0][field], errors[1][field]) << field;
  EXPECT_EQ(errors[0]["code"], "deadline_exceeded");
  EXPECT_NE(errors[0]["message"].get<std::string>().find("never scheduled"), std::string::npos) << errors[0];
  running.close();
  wait_metrics(port(), [](std::map<std::string, double>& m) { return m["ubatch_requests_running"] == 0; });
}

}  // namespace
}  // namespace ubatch::test
