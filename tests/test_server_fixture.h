// Shared by the test_server_*.cpp files: a real server (model, context, engine, HttpServer)
// on an ephemeral loopback port, and a small HTTP/SSE/Prometheus toolkit for the tests.
#pragma once

#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <fcntl.h>
#include <spawn.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "context/context.h"
#include "gguf/gguf.h"
#include "model/model.h"
#include "sched/engine.h"
#include "server/http_server.h"
#include "loadgen/http_client.h"
#include "support.h"
#include "tokenizer/tokenizer.h"

extern char** environ;

namespace ubatch::test {

using json = nlohmann::json;

inline std::string tiny_model() { return reference_path("models/tiny-llama-q8_0.gguf"); }

// A model served on 127.0.0.1:<ephemeral port>. Destruction stops the server before the engine.
struct ServedModel {
  std::shared_ptr<Model> model;
  std::unique_ptr<Tokenizer> tokenizer;
  std::unique_ptr<Context> context;
  std::unique_ptr<sched::Engine> engine;
  std::unique_ptr<server::HttpServer> http;
  int port = -1;

  ~ServedModel() {
    if (http) http->stop();
    http.reset();
    engine.reset();
  }
};

struct ServeOptions {
  server::ServerConfig server;
  sched::EngineConfig engine;
  int32_t n_ctx = 2048;
  int32_t n_threads = 1;       // the tiny model needs no more; the default model tests ask for 2
  TensorType state_type = TensorType::F32;  // recurrent state storage (hybrid models)
  bool attach_backend = true;  // false: the server runs "loading" until the test attaches it
};

// Loads `path` and serves it; fails the current test (and returns null) on any error.
inline std::unique_ptr<ServedModel> serve_model(const std::string& path, ServeOptions o = {}) {
  spdlog::set_level(spdlog::level::warn);
  auto s = std::make_unique<ServedModel>();
  Result<std::unique_ptr<gguf::File>> file = gguf::File::open(path);
  if (!file) return ADD_FAILURE() << file.message(), nullptr;
  std::shared_ptr<const gguf::File> shared(std::move(file.value()));
  Result<std::unique_ptr<Model>> model = Model::load(shared);
  if (!model) return ADD_FAILURE() << model.message(), nullptr;
  s->model = std::shared_ptr<Model>(std::move(model.value()));
  Result<std::unique_ptr<Tokenizer>> tok = Tokenizer::from_gguf(*shared);
  if (!tok) return ADD_FAILURE() << tok.message(), nullptr;
  s->tokenizer = std::move(tok.value());
  ContextParams cp;
  cp.n_ctx = o.n_ctx;
  cp.n_batch = o.engine.n_batch;
  cp.n_ubatch = std::min(o.engine.n_batch, 512);
  cp.n_threads = o.n_threads;
  cp.state_type = o.state_type;
  Result<std::unique_ptr<Context>> ctx = Context::create(s->model, cp);
  if (!ctx) return ADD_FAILURE() << ctx.message(), nullptr;
  s->context = std::move(ctx.value());
  s->engine = std::make_unique<sched::Engine>(*s->context, *s->tokenizer, o.engine);
  o.server.host = "127.0.0.1";
  o.server.port = 0;
  if (o.server.model_name.empty()) o.server.model_name = "test-model";
  s->http = std::make_unique<server::HttpServer>(o.server);
  Result<int> port = s->http->bind();
  if (!port) return ADD_FAILURE() << port.message(), nullptr;
  s->port = port.value();
  if (o.attach_backend) s->http->set_backend(*s->engine, *s->tokenizer);
  if (Status st = s->http->start(); !st) return ADD_FAILURE() << st.message(), nullptr;
  return s;
}

// A client of the server on 127.0.0.1:port (keep-alive; generous timeouts for loaded machines).
inline std::unique_ptr<loadgen::HttpClient> client(int port) {
  loadgen::HttpClientOptions o;
  o.host = "127.0.0.1";
  o.port = port;
  o.connect_timeout_s = 10;
  o.io_timeout_s = 300;
  return std::make_unique<loadgen::HttpClient>(o);
}

struct Reply {
  int status = -1;  // -1: no response (connection error)
  std::string body;
  HttpHeaders headers;
  json parsed() const { return json::parse(body, nullptr, false); }
};

// One request on a fresh connection.
inline Reply request(int port, const std::string& method, const std::string& path, const std::string& body,
                     HttpHeaders headers = {}, const std::string& content_type = "application/json") {
  Reply r;
  if (!body.empty() || method == "POST") headers.emplace("Content-Type", content_type);
  loadgen::HttpReply reply;
  if (!client(port)->request(method, path, headers, body, reply).ok()) return r;
  r.status = reply.status;
  r.body = std::move(reply.body);
  r.headers = std::move(reply.headers);
  return r;
}

inline Reply post(int port, const std::string& path, const std::string& body, const HttpHeaders& headers = {}) {
  return request(port, "POST", path, body, headers);
}

inline Reply get(int port, const std::string& path, const HttpHeaders& headers = {}) {
  return request(port, "GET", path, "", headers);
}

// GET on a fresh connection whose body is handed to on_body(status, bytes) piece by piece
// until it returns false (the connection is then closed): reads endless event streams.
// Returns the status and header fields (status -1: no response); the body stays empty.
inline Reply get_stream(int port, const std::string& path, const HttpHeaders& headers,
                        const std::function<bool(int status, std::string_view bytes)>& on_body) {
  Reply r;
  loadgen::HttpReply reply;
  client(port)->request(
      "GET", path, headers, "", reply,
      [&](const loadgen::HttpReply& head) {
        r.status = head.status;
        r.headers = head.headers;
      },
      [&](std::string_view bytes) { return on_body(r.status, bytes); });
  return r;
}

// The `data:` payloads of an SSE body, in order ("[DONE]" included); comment frames (`: …\n\n`,
// the server's keep-alives) are skipped, and counted in *comments when given. Fails the test
// on any bytes that are not part of a `data: ...\n\n` or comment frame.
inline std::vector<std::string> sse_payloads(const std::string& body, int* comments = nullptr) {
  std::vector<std::string> out;
  size_t pos = 0;
  if (comments) *comments = 0;
  while (pos < body.size()) {
    const size_t end = body.find("\n\n", pos);
    if (end != std::string::npos && body[pos] == ':' && body.find('\n', pos) == end) {
      if (comments) ++*comments;
      pos = end + 2;
      continue;
    }
    if (end == std::string::npos || body.compare(pos, 6, "data: ") != 0) {
      ADD_FAILURE() << "malformed SSE at byte " << pos << ": " << body.substr(pos, 80);
      break;
    }
    out.push_back(body.substr(pos + 6, end - pos - 6));
    pos = end + 2;
  }
  return out;
}

struct StreamResult {
  int status = -1;
  std::vector<json> chunks;           // parsed frames before [DONE]
  bool done = false;                  // [DONE] seen last
  std::map<int, std::string> text;    // per choice index: concatenated text / delta content
  std::map<int, std::string> finish;  // per choice index
  json usage;                         // from the usage chunk, if any
};

// POSTs a streaming request and parses every frame; each must be valid JSON.
inline StreamResult post_stream(int port, const std::string& path, const json& body) {
  StreamResult r;
  Reply reply = post(port, path, body.dump());
  r.status = reply.status;
  if (reply.status != 200) return r;
  std::vector<std::string> payloads = sse_payloads(reply.body);
  for (size_t i = 0; i < payloads.size(); ++i) {
    if (payloads[i] == "[DONE]") {
      r.done = i + 1 == payloads.size();
      EXPECT_TRUE(r.done) << "[DONE] is not the last frame";
      break;
    }
    json chunk = json::parse(payloads[i], nullptr, false);
    if (chunk.is_discarded()) {
      ADD_FAILURE() << "frame " << i << " is not valid JSON: " << payloads[i];
      continue;
    }
    if (chunk.contains("usage") && chunk["usage"].is_object()) r.usage = chunk["usage"];
    for (const json& c : chunk.value("choices", json::array())) {
      const int idx = c.value("index", -1);
      if (c.contains("text")) r.text[idx] += c["text"].get<std::string>();
      if (c.contains("delta") && c["delta"].contains("content")) r.text[idx] += c["delta"]["content"].get<std::string>();
      if (c.contains("finish_reason") && c["finish_reason"].is_string()) r.finish[idx] = c["finish_reason"];
    }
    r.chunks.push_back(std::move(chunk));
  }
  return r;
}

// Prometheus text → {"name{labels}": value}; fails the test on lines that do not parse or
// samples whose metric has no # TYPE line. A sample with a `model` label is also summed under
// its name without that label ("ubatch_x{model=\"a\"}" → "ubatch_x" too): a test of one model
// reads its engine's numbers as before.
inline std::map<std::string, double> parse_prometheus(const std::string& text) {
  std::map<std::string, double> out;
  std::map<std::string, std::string> types;
  static const std::regex type_re(R"(^# TYPE ([a-zA-Z_:][a-zA-Z0-9_:]*) (counter|gauge|histogram|summary|untyped)$)");
  static const std::regex help_re(R"(^# HELP ([a-zA-Z_:][a-zA-Z0-9_:]*) .*$)");
  static const std::regex sample_re(
      R"(^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{([a-zA-Z_][a-zA-Z0-9_]*="[^"\\]*"(,[a-zA-Z_][a-zA-Z0-9_]*="[^"\\]*")*)?\})? (\S+)$)");
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    std::smatch m;
    if (line.empty()) continue;
    if (std::regex_match(line, m, type_re)) {
      types[m[1]] = m[2];
      continue;
    }
    if (std::regex_match(line, m, help_re)) continue;
    if (!std::regex_match(line, m, sample_re)) {
      ADD_FAILURE() << "not a Prometheus sample line: " << line;
      continue;
    }
    std::string name = m[1];
    std::string base = name;
    for (const char* suffix : {"_bucket", "_sum", "_count"}) {
      const std::string s = suffix;
      if (base.size() > s.size() && base.compare(base.size() - s.size(), s.size(), s) == 0 &&
          types.count(base.substr(0, base.size() - s.size())) &&
          types[base.substr(0, base.size() - s.size())] == "histogram")
        base = base.substr(0, base.size() - s.size());
    }
    if (!types.count(base)) ADD_FAILURE() << "sample without # TYPE: " << line;
    if (types[base] == "counter" && name.size() < 6) ADD_FAILURE() << "bad counter name " << name;
    char* end = nullptr;
    const std::string value = m[5];
    const double v = std::strtod(value.c_str(), &end);
    if (end != value.c_str() + value.size()) ADD_FAILURE() << "bad value in: " << line;
    out[name + std::string(m[2])] = v;
    static const std::regex model_label(R"(model="[^"\\]*",?)");
    std::string rest = std::regex_replace(std::string(m[3]), model_label, "");
    if (!rest.empty() && rest.back() == ',') rest.pop_back();
    if (rest != std::string(m[3])) out[name + (rest.empty() ? "" : "{" + rest + "}")] += v;
  }
  return out;
}

inline std::map<std::string, double> metrics(int port) {
  Reply r = get(port, "/metrics");
  EXPECT_EQ(r.status, 200);
  return parse_prometheus(r.body);
}

// A raw TCP connection to the server (for disconnect tests).
class RawConnection {
 public:
  explicit RawConnection(int port) {
    fd_ = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(port));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
      ::close(fd_);
      fd_ = -1;
    }
  }
  ~RawConnection() { close(); }
  bool ok() const { return fd_ >= 0; }
  int fd() const { return fd_; }
  bool send_post(const std::string& path, const std::string& body) {
    std::string req = "POST " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n" +
                      "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
    return ::send(fd_, req.data(), req.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(req.size());
  }
  // Reads until `count` occurrences of `marker` were received (or the peer closes).
  std::string read_until(const std::string& marker, int count) {
    std::string got;
    char buf[4096];
    auto occurrences = [&] {
      int n = 0;
      for (size_t p = got.find(marker); p != std::string::npos; p = got.find(marker, p + marker.size())) ++n;
      return n;
    };
    while (occurrences() < count) {
      const ssize_t n = ::recv(fd_, buf, sizeof(buf), 0);
      if (n <= 0) break;
      got.append(buf, static_cast<size_t>(n));
    }
    return got;
  }
  void close() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

 private:
  int fd_ = -1;
};

// Polls /metrics until pred holds (at most `tries` × 50 ms); returns the last snapshot.
template <typename Pred>
std::map<std::string, double> wait_metrics(int port, Pred pred, int tries = 600) {
  std::map<std::string, double> m;
  for (int i = 0; i < tries; ++i) {
    m = metrics(port);
    if (pred(m)) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return m;
}


// A `ubatch serve` process started by a test (tests that drive the real binary from another
// program: the OpenAI client, the browser, the structured-output corpus).
struct SpawnedServer {
  pid_t pid = -1;     // -1: posix_spawn failed
  int port = -1;      // the port it bound, read from its log (-1: never logged)
  bool ready = false; // /health answered 200
};

// Starts `args` (argv[0] the binary, e.g. from ubatch_argv) with stderr to `log` and stdout to
// /dev/null, reads the bound port from the log's "listening on" line, then polls /health
// until 200. Each wait is bounded at 600 × 100 ms.
inline SpawnedServer spawn_serve(std::vector<std::string> args, const std::string& log) {
  SpawnedServer s;
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 2, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0);
  const int rc = posix_spawn(&s.pid, argv[0], &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (rc != 0) {
    s.pid = -1;
    return s;
  }
  static const std::regex listening(R"(listening on http://127\.0\.0\.1:(\d+))");
  for (int i = 0; i < 600 && s.port < 0; ++i) {
    std::ifstream in(log);
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    std::smatch m;
    if (std::regex_search(text, m, listening)) s.port = std::stoi(m[1]);
    else std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  for (int i = 0; i < 600 && s.port > 0 && !s.ready; ++i) {
    s.ready = get(s.port, "/health").status == 200;
    if (!s.ready) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return s;
}

// The named events of an SSE body ("event: <name>\ndata: <json>\n\n", as the Responses and
// Anthropic Messages APIs stream): (name, parsed data) in order. Fails the test on a frame
// without an event line, or whose data is not JSON.
inline std::vector<std::pair<std::string, json>> sse_named_events(const std::string& body) {
  std::vector<std::pair<std::string, json>> out;
  size_t pos = 0;
  while (pos < body.size()) {
    const size_t end = body.find("\n\n", pos);
    if (end == std::string::npos) {
      ADD_FAILURE() << "unterminated SSE frame at byte " << pos;
      break;
    }
    const std::string frame = body.substr(pos, end - pos);
    pos = end + 2;
    if (frame[0] == ':') continue;  // keep-alive comment
    const size_t nl = frame.find('\n');
    if (frame.compare(0, 7, "event: ") != 0 || nl == std::string::npos || frame.compare(nl + 1, 6, "data: ") != 0) {
      ADD_FAILURE() << "not an event frame: " << frame.substr(0, 80);
      continue;
    }
    json data = json::parse(frame.substr(nl + 7), nullptr, false);
    if (data.is_discarded()) ADD_FAILURE() << "event data is not JSON: " << frame.substr(0, 200);
    out.emplace_back(frame.substr(7, nl - 7), std::move(data));
  }
  return out;
}

}  // namespace ubatch::test

#define UBATCH_REQUIRE_TINY_MODEL()                                                          \
  do {                                                                                       \
    if (!std::filesystem::exists(::ubatch::test::tiny_model()))                              \
      GTEST_SKIP() << "tiny reference model not found at " << ::ubatch::test::tiny_model(); \
  } while (0)
