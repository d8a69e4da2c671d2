// The HTTP/1.1 transport of `ubatch serve` against hostile and unusual clients, on raw
// sockets against a real server (tiny reference model) on loopback: idle and slow-loris
// connections do not starve others, timeouts close them, body limits hold whatever the
// transfer coding, a request refused before its body leaves no bytes behind, pipelined
// requests are answered in order, CORS preflights, Expect: 100-continue after the checks,
// slow stream readers are cut off without stalling others, the connection limit, drain,
// HTTP/1.0 framing, and the keep-alive comments of silent event streams (server/sse.h).
// No timing assertion: every wait is bounded generously and only outcomes are checked.
#include "test_server_fixture.h"

#include <poll.h>

#include <atomic>
#include <cerrno>
#include <future>

#include "server/http/server.h"
#include "server/sse.h"

namespace ubatch::test {
namespace {

using Clock = std::chrono::steady_clock;

// A raw client connection with bounded waits.
class Wire {
 public:
  explicit Wire(int port, int rcvbuf = 0) {
    fd_ = socket(AF_INET, SOCK_STREAM, 0);
    if (rcvbuf > 0) setsockopt(fd_, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof(rcvbuf));
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(port));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) close();
  }
  ~Wire() { close(); }
  Wire(const Wire&) = delete;
  bool ok() const { return fd_ >= 0; }
  void close() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }
  // Sends all of s (false when the peer is gone).
  bool send(const std::string& s) {
    size_t off = 0;
    while (off < s.size()) {
      const ssize_t n = ::send(fd_, s.data() + off, s.size() - off, MSG_NOSIGNAL);
      if (n <= 0) return false;
      off += static_cast<size_t>(n);
    }
    return true;
  }
  // Reads what arrives within `ms` (appended to buffer()). Returns false on EOF or error.
  bool pump(int ms) {
    pollfd p{fd_, POLLIN, 0};
    if (poll(&p, 1, ms) <= 0) return true;
    char buf[65536];
    const ssize_t n = ::recv(fd_, buf, sizeof(buf), 0);
    if (n <= 0) {
      eof_ = true;
      reset_ = n < 0 && errno == ECONNRESET;
      return false;
    }
    in_.append(buf, static_cast<size_t>(n));
    return true;
  }
  // Reads until `marker` is in the buffer, EOF, or `seconds` pass. True when found.
  bool wait_for(const std::string& marker, double seconds = 60) {
    const auto until = Clock::now() + std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000));
    while (in_.find(marker) == std::string::npos && !eof_ && Clock::now() < until) pump(50);
    return in_.find(marker) != std::string::npos;
  }
  // Reads until the server closes the connection, within `seconds`. True when it did.
  bool wait_closed(double seconds = 60) {
    const auto until = Clock::now() + std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000));
    while (!eof_ && Clock::now() < until) pump(50);
    return eof_;
  }
  std::string& buffer() { return in_; }
  int fd() const { return fd_; }
  // True when the connection ended with a reset (RST: recv failed with ECONNRESET), not a FIN.
  bool reset() const { return reset_; }

  struct Response {
    int status = 0;  // 0: none (cut off)
    HttpHeaders headers;
    std::string body;  // de-chunked
  };
  // Takes one whole response from the stream (reading as needed, `seconds` at most).
  Response next_response(double seconds = 60) {
    Response r;
    if (!wait_for("\r\n\r\n", seconds)) return r;
    const size_t end = in_.find("\r\n\r\n");
    std::istringstream head(in_.substr(0, end));
    std::string line;
    std::getline(head, line);
    if (line.rfind("HTTP/1.1 ", 0) != 0) return r;
    r.status = std::atoi(line.c_str() + 9);
    while (std::getline(head, line)) {
      if (!line.empty() && line.back() == '\r') line.pop_back();
      const size_t colon = line.find(':');
      if (colon == std::string::npos) continue;
      size_t v = colon + 1;
      while (v < line.size() && line[v] == ' ') ++v;
      r.headers.emplace(line.substr(0, colon), line.substr(v));
    }
    in_.erase(0, end + 4);
    auto te = r.headers.find("Transfer-Encoding");
    if (te != r.headers.end() && te->second == "chunked") {
      while (true) {
        if (!wait_for("\r\n", seconds)) return Response{};
        const size_t eol = in_.find("\r\n");
        const size_t size = std::stoul(in_.substr(0, eol), nullptr, 16);
        while (in_.size() < eol + 2 + size + 2 && !eof_) pump(50);
        if (in_.size() < eol + 2 + size + 2) return Response{};
        r.body += in_.substr(eol + 2, size);
        in_.erase(0, eol + 2 + size + 2);
        if (size == 0) break;
      }
    } else if (r.status >= 200 && r.status != 204 && r.status != 304) {
      auto cl = r.headers.find("Content-Length");
      const size_t length = cl == r.headers.end() ? 0 : std::stoul(cl->second);
      const auto until = Clock::now() + std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000));
      while (in_.size() < length && !eof_ && Clock::now() < until) pump(50);
      if (in_.size() < length) return Response{};
      r.body = in_.substr(0, length);
      in_.erase(0, length);
    }
    return r;
  }

 private:
  int fd_ = -1;
  bool eof_ = false;
  bool reset_ = false;
  std::string in_;
};

std::string http_post(const std::string& path, const std::string& body, const std::string& extra = "") {
  return "POST " + path + " HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n" + extra +
         "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
}
std::string http_get(const std::string& path, const std::string& extra = "") {
  return "GET " + path + " HTTP/1.1\r\nHost: t\r\n" + extra + "\r\n";
}

ServeOptions tiny_options() {
  ServeOptions o;
  o.engine.n_parallel = 4;
  o.engine.n_batch = 64;
  o.n_ctx = 2048;
  o.server.max_body = 64 * 1024;
  return o;
}

const std::string kCompletion = R"({"prompt": "hello", "max_tokens": 4, "temperature": 0})";

class ServerTransport : public ::testing::Test {
 protected:
  void SetUp() override { UBATCH_REQUIRE_TINY_MODEL(); }
  void serve(ServeOptions o) {
    served_ = serve_model(tiny_model(), o);
    ASSERT_NE(served_, nullptr);
  }
  int port() const { return served_->port; }
  std::unique_ptr<ServedModel> served_;
};

TEST_F(ServerTransport, IdleAndSlowLorisConnectionsDoNotStarveOthers) {
  ServeOptions o = tiny_options();
  o.server.keep_alive_timeout_s = 120;  // nothing here may be reclaimed by a timeout
  o.server.header_timeout_s = 120;
  serve(o);
  std::vector<std::unique_ptr<Wire>> idle;
  for (int i = 0; i < 100; ++i) {
    idle.push_back(std::make_unique<Wire>(port()));
    ASSERT_TRUE(idle.back()->ok()) << i;
  }
  // Slow-loris senders: a header that never ends, one byte at a time.
  std::atomic<bool> stop{false};
  std::vector<std::thread> loris;
  for (int i = 0; i < 5; ++i)
    loris.emplace_back([&, i] {
      Wire w(port());
      w.send("GET /health HTTP/1.1\r\nHost: t\r\nX-Slow-" + std::to_string(i) + ": ");
      while (!stop) {
        if (!w.send("a")) break;
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
      }
    });
  for (int round = 0; round < 3; ++round) {
    EXPECT_EQ(get(port(), "/health").status, 200);
    Reply c = post(port(), "/v1/completions", kCompletion);
    EXPECT_EQ(c.status, 200) << c.body;
  }
  std::map<std::string, double> m = metrics(port());
  EXPECT_GE(m["ubatch_http_connections_open"], 105);
  stop = true;
  for (std::thread& t : loris) t.join();
}

TEST_F(ServerTransport, TimeoutsCloseIdleSlowHeaderAndSlowBodyConnections) {
  ServeOptions o = tiny_options();
  o.server.keep_alive_timeout_s = 1;
  o.server.header_timeout_s = 0.5;
  o.server.body_timeout_s = 0.5;
  serve(o);
  Wire idle(port());
  Wire slow_header(port());
  Wire slow_body(port());
  ASSERT_TRUE(idle.ok() && slow_header.ok() && slow_body.ok());
  ASSERT_TRUE(slow_header.send("GET /health HTTP/1.1\r\nHost: t\r\n"));
  ASSERT_TRUE(slow_body.send("POST /tokenize HTTP/1.1\r\nHost: t\r\nContent-Length: 100\r\n\r\n{\"content\""));
  // The slow header keeps trickling: the deadline runs from its first byte, not the last.
  for (int i = 0; i < 10 && slow_header.send("X"); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_TRUE(idle.wait_closed());
  Wire::Response h = slow_header.next_response();
  EXPECT_EQ(h.status, 408);
  EXPECT_EQ(json::parse(h.body, nullptr, false)["error"]["code"], "request_timeout") << h.body;
  EXPECT_TRUE(slow_header.wait_closed());
  EXPECT_EQ(slow_body.next_response().status, 408);
  EXPECT_TRUE(slow_body.wait_closed());
  std::map<std::string, double> m = metrics(port());
  EXPECT_GE(m["ubatch_http_timeouts_total{phase=\"idle\"}"], 1);
  EXPECT_GE(m["ubatch_http_timeouts_total{phase=\"header\"}"], 1);
  EXPECT_GE(m["ubatch_http_timeouts_total{phase=\"body\"}"], 1);
}

TEST_F(ServerTransport, ChunkedBodyOverTheLimitIs413WithoutReadingItAll) {
  serve(tiny_options());  // --max-body 64 KiB
  const std::string head = "POST /v1/completions HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n";
  {
    // One chunk announcing 16 MiB: refused at its size line.
    Wire w(port());
    ASSERT_TRUE(w.send(head + "1000000\r\n" + std::string(1000, 'a')));
    Wire::Response r = w.next_response();
    EXPECT_EQ(r.status, 413);
    EXPECT_EQ(r.headers.count("Connection") ? r.headers.find("Connection")->second : "", "close");
    EXPECT_EQ(json::parse(r.body, nullptr, false)["error"]["code"], "request_too_large") << r.body;
    EXPECT_TRUE(w.wait_closed());
  }
  {
    // 8 KiB chunks past the limit and no last chunk: answered at the crossing chunk (a server
    // reading the whole body would wait for the end and never answer).
    Wire w(port());
    std::string body = head;
    for (int i = 0; i < 10; ++i) body += "2000\r\n" + std::string(8192, 'a') + "\r\n";
    ASSERT_TRUE(w.send(body));
    EXPECT_EQ(w.next_response().status, 413);
    EXPECT_TRUE(w.wait_closed());
  }
  {
    // Content-Length over the limit: refused before any body byte is sent.
    Wire w(port());
    ASSERT_TRUE(w.send("POST /v1/completions HTTP/1.1\r\nHost: t\r\nContent-Length: 10485760\r\n\r\n"));
    EXPECT_EQ(w.next_response().status, 413);
    EXPECT_TRUE(w.wait_closed());
  }
  EXPECT_EQ(get(port(), "/health").status, 200);
}

TEST_F(ServerTransport, AClientThatSendsItsWholeOversizeBodyBeforeReadingGets413) {
  // The usual blocking client: write the request, body and all, then read. The server answers
  // 413 at the header and lingers, dropping the body's bytes, so the writes succeed and the
  // answer is there to read — closing at once would reset the connection under the writer
  // (EPIPE) and could destroy the answer.
  serve(tiny_options());  // --max-body 64 KiB
  const std::string body(4 << 20, 'a');
  Wire w(port());
  ASSERT_TRUE(w.send("POST /v1/completions HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n"
                     "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body))
      << "the connection was reset while the body was sent";
  Wire::Response r = w.next_response();
  EXPECT_EQ(r.status, 413);
  EXPECT_EQ(json::parse(r.body, nullptr, false)["error"]["code"], "request_too_large") << r.body;
  EXPECT_TRUE(w.wait_closed());
}

TEST_F(ServerTransport, MalformedChunkIs400AndTheConnectionCloses) {
  serve(tiny_options());
  Wire w(port());
  ASSERT_TRUE(w.send("POST /tokenize HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\nZZZ\r\nabc\r\n0\r\n\r\n" +
                     http_get("/health")));
  Wire::Response r = w.next_response();
  EXPECT_EQ(r.status, 400);
  EXPECT_EQ(json::parse(r.body, nullptr, false)["error"]["code"], "malformed_http") << r.body;
  EXPECT_TRUE(w.wait_closed());
  EXPECT_EQ(w.buffer().find("HTTP/1.1"), std::string::npos) << "a second response: " << w.buffer();
  EXPECT_GE(metrics(port())["ubatch_http_bad_requests_total"], 1);
}

TEST_F(ServerTransport, ARequestRefusedBeforeItsBodyLeavesNothingBehind) {
  ServeOptions o = tiny_options();
  o.server.api_key = "k";
  serve(o);
  const std::string body(65536, ' ');  // 64 KiB of JSON whitespace: valid padding were it read
  for (const std::string& path : {std::string("/v1/completions"), std::string("/no/such/route")}) {
    SCOPED_TRACE(path);
    Wire w(port());
    // The body, then a pipelined request that would be parsed out of the body's bytes if the
    // server kept the connection without reading them.
    ASSERT_TRUE(w.send(http_post(path, body) + http_get("/health")));
    Wire::Response r = w.next_response();
    EXPECT_EQ(r.status, 401);  // the key is checked first, before the route
    EXPECT_EQ(r.headers.count("Connection") ? r.headers.find("Connection")->second : "", "close");
    EXPECT_TRUE(w.wait_closed());
    EXPECT_EQ(w.buffer().find("HTTP/1.1"), std::string::npos) << "a second response: " << w.buffer().substr(0, 200);
  }
  // With the key, an unknown route with a body: 404, closed the same way.
  Wire w(port());
  ASSERT_TRUE(w.send(http_post("/no/such/route", body, "Authorization: Bearer k\r\n") + http_get("/health")));
  EXPECT_EQ(w.next_response().status, 404);
  EXPECT_TRUE(w.wait_closed());
  EXPECT_EQ(w.buffer().find("HTTP/1.1"), std::string::npos);
}

TEST_F(ServerTransport, PipelinedRequestsAreAllAnsweredInOrder) {
  serve(tiny_options());
  Wire w(port());
  const std::string stream = R"({"prompt": "hello", "max_tokens": 5, "temperature": 0, "stream": true})";
  ASSERT_TRUE(w.send(http_get("/health") + http_post("/tokenize", R"({"content": "hello"})") +
                     http_post("/v1/completions", stream) + http_post("/v1/completions", kCompletion) +
                     http_get("/v1/models")));
  Wire::Response health = w.next_response();
  EXPECT_EQ(health.status, 200);
  EXPECT_EQ(json::parse(health.body, nullptr, false)["status"], "ok");
  Wire::Response tok = w.next_response();
  EXPECT_EQ(tok.status, 200);
  EXPECT_TRUE(json::parse(tok.body, nullptr, false)["tokens"].is_array()) << tok.body;
  Wire::Response sse = w.next_response();
  EXPECT_EQ(sse.status, 200);
  std::vector<std::string> frames = sse_payloads(sse.body);
  ASSERT_FALSE(frames.empty());
  EXPECT_EQ(frames.back(), "[DONE]");
  Wire::Response plain = w.next_response();
  EXPECT_EQ(plain.status, 200);
  EXPECT_EQ(json::parse(plain.body, nullptr, false)["object"], "text_completion") << plain.body;
  Wire::Response models = w.next_response();
  EXPECT_EQ(models.status, 200);
  EXPECT_EQ(json::parse(models.body, nullptr, false)["object"], "list") << models.body;
  // The connection stays usable.
  ASSERT_TRUE(w.send(http_get("/health")));
  EXPECT_EQ(w.next_response().status, 200);
}

TEST_F(ServerTransport, CorsPreflightNeedsNoKeyAndResponsesCarryTheOrigin) {
  ServeOptions o = tiny_options();
  o.server.api_key = "k";
  o.server.cors_origins = {"https://app.example.com", "http://localhost:3000"};
  serve(o);
  const std::string origin = "https://app.example.com";
  Reply pre = request(port(), "OPTIONS", "/v1/chat/completions", "",
                      {{"Origin", origin},
                       {"Access-Control-Request-Method", "POST"},
                       {"Access-Control-Request-Headers", "authorization, content-type"}});
  EXPECT_EQ(pre.status, 204);
  auto field = [](const Reply& r, const char* name) {
    auto it = r.headers.find(name);
    return it == r.headers.end() ? std::string("<absent>") : it->second;
  };
  EXPECT_EQ(field(pre, "Access-Control-Allow-Origin"), origin);
  EXPECT_NE(field(pre, "Access-Control-Allow-Methods").find("POST"), std::string::npos);
  EXPECT_EQ(field(pre, "Access-Control-Allow-Headers"), "authorization, content-type");
  EXPECT_EQ(field(pre, "Vary"), "Origin");
  EXPECT_NE(field(pre, "Access-Control-Max-Age"), "<absent>");
  // Another origin: answered, but without permission (the browser then refuses).
  Reply other = request(port(), "OPTIONS", "/v1/chat/completions", "",
                        {{"Origin", "https://evil.example"}, {"Access-Control-Request-Method", "POST"}});
  EXPECT_EQ(other.status, 204);
  EXPECT_EQ(field(other, "Access-Control-Allow-Origin"), "<absent>");
  // Actual requests from the allowed origin carry it, errors included.
  Reply ok = post(port(), "/v1/completions", kCompletion, {{"Origin", origin}, {"Authorization", "Bearer k"}});
  EXPECT_EQ(ok.status, 200);
  EXPECT_EQ(field(ok, "Access-Control-Allow-Origin"), origin);
  Reply denied = post(port(), "/v1/completions", kCompletion, {{"Origin", origin}});
  EXPECT_EQ(denied.status, 401);
  EXPECT_EQ(field(denied, "Access-Control-Allow-Origin"), origin);
  EXPECT_NE(field(denied, "Access-Control-Expose-Headers").find("Retry-After"), std::string::npos);
  EXPECT_EQ(field(post(port(), "/v1/completions", kCompletion, {{"Authorization", "Bearer k"}}),
                  "Access-Control-Allow-Origin"),
            "<absent>");  // no Origin, no CORS fields
  EXPECT_EQ(request(port(), "OPTIONS", "/nope", "", {{"Origin", origin}}).status, 404);
}

TEST_F(ServerTransport, CorsWildcardOffAndInvalid) {
  ServeOptions o = tiny_options();
  o.server.api_key = "k";
  o.server.cors_origins = {"*"};
  serve(o);
  Reply any = request(port(), "OPTIONS", "/v1/models", "",
                      {{"Origin", "https://anything.example"}, {"Access-Control-Request-Method", "GET"}});
  EXPECT_EQ(any.status, 204);
  ASSERT_TRUE(any.headers.count("Access-Control-Allow-Origin"));
  EXPECT_EQ(any.headers.find("Access-Control-Allow-Origin")->second, "*");
  served_.reset();

  serve(tiny_options());  // CORS off: OPTIONS is still answered (204, Allow), with no CORS field
  Reply off = request(port(), "OPTIONS", "/v1/models", "",
                      {{"Origin", "https://anything.example"}, {"Access-Control-Request-Method", "GET"}});
  EXPECT_EQ(off.status, 204);
  EXPECT_TRUE(off.headers.find("Access-Control-Allow-Origin") == off.headers.end());
  ASSERT_TRUE(off.headers.count("Allow"));
  EXPECT_NE(off.headers.find("Allow")->second.find("GET"), std::string::npos);

  server::ServerConfig bad;
  bad.port = 0;
  bad.cors_origins = {"app.example.com"};
  server::HttpServer h(bad);
  Result<int> p = h.bind();
  ASSERT_FALSE(p);
  EXPECT_NE(p.message().find("app.example.com"), std::string::npos) << p.message();
}

TEST_F(ServerTransport, ExpectContinueComesOnlyAfterTheChecks) {
  ServeOptions o = tiny_options();
  o.server.api_key = "k";
  serve(o);
  const std::string body = R"({"content": "hello"})";
  auto head = [&](const std::string& extra, size_t length) {
    return "POST /tokenize HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\nExpect: 100-continue\r\n" + extra +
           "Content-Length: " + std::to_string(length) + "\r\n\r\n";
  };
  {
    Wire w(port());  // no key: 401 at once, never 100
    ASSERT_TRUE(w.send(head("", body.size())));
    EXPECT_EQ(w.next_response().status, 401);
    EXPECT_TRUE(w.wait_closed());
    EXPECT_EQ(w.buffer().find("100 Continue"), std::string::npos);
  }
  {
    Wire w(port());  // the key, but too large: 413, never 100
    ASSERT_TRUE(w.send(head("Authorization: Bearer k\r\n", 1 << 20)));
    Wire::Response r = w.next_response();
    EXPECT_EQ(r.status, 413);
    EXPECT_TRUE(w.wait_closed());
  }
  {
    Wire w(port());  // all fine: 100 Continue, and only then the body
    ASSERT_TRUE(w.send(head("Authorization: Bearer k\r\n", body.size())));
    ASSERT_TRUE(w.wait_for("\r\n\r\n"));
    EXPECT_EQ(w.buffer().rfind("HTTP/1.1 100 Continue\r\n\r\n", 0), 0u) << w.buffer();
    w.buffer().erase(0, w.buffer().find("\r\n\r\n") + 4);
    ASSERT_TRUE(w.send(body));
    Wire::Response r = w.next_response();
    EXPECT_EQ(r.status, 200);
    EXPECT_TRUE(json::parse(r.body, nullptr, false)["tokens"].is_array()) << r.body;
  }
}

TEST_F(ServerTransport, ASlowStreamReaderIsCancelledWithoutStallingOthers) {
  ServeOptions o = tiny_options();
  o.server.stream_buffer = 16 * 1024;
  o.server.max_n = 4;
  o.n_ctx = 8192;  // room for 4 × 1900 tokens
  serve(o);
  std::map<std::string, double> before = metrics(port());
  // A reader that never reads, with a small receive window: large frames (logprobs) pile up
  // in the kernel's buffers, then in the server's stream buffer, which overflows.
  Wire slow(port(), 4096);
  ASSERT_TRUE(slow.ok());
  ASSERT_TRUE(slow.send(http_post("/v1/completions", R"({"prompt": "a", "max_tokens": 1900, "n": 4, "logprobs": 5,
                                                          "ignore_eos": true, "temperature": 1, "stream": true})")));
  // Meanwhile other streams run to their end.
  for (int i = 0; i < 3; ++i) {
    StreamResult s = post_stream(port(), "/v1/completions",
                                 {{"prompt", "hello"}, {"max_tokens", 16}, {"temperature", 0}, {"stream", true}});
    EXPECT_EQ(s.status, 200);
    EXPECT_TRUE(s.done);
  }
  std::map<std::string, double> after = wait_metrics(port(), [&](std::map<std::string, double>& m) {
    return m["ubatch_http_slow_clients_total"] >= before["ubatch_http_slow_clients_total"] + 1 &&
           m["ubatch_requests_running"] == 0 && m["ubatch_kv_blocks_used"] == 0;
  }, 2400);
  EXPECT_EQ(after["ubatch_http_slow_clients_total"] - before["ubatch_http_slow_clients_total"], 1);
  EXPECT_GE(after["ubatch_requests_cancelled_total"] - before["ubatch_requests_cancelled_total"], 1);
  EXPECT_LT(after["ubatch_generated_tokens_total"] - before["ubatch_generated_tokens_total"], 4 * 1900);
  EXPECT_EQ(after["ubatch_kv_blocks_used"], 0);
  // The cut-off connection is reset, not closed gracefully: the reader sees its end at once,
  // however much was still queued in the server's socket buffer (a graceful close left an
  // orphaned socket trickling it for minutes through zero-window probes).
  EXPECT_TRUE(slow.wait_closed(20));
  EXPECT_TRUE(slow.reset());
}

TEST_F(ServerTransport, ConnectionsBeyondTheLimitAreClosedAtOnce) {
  ServeOptions o = tiny_options();
  o.server.max_connections = 8;
  o.server.keep_alive_timeout_s = 120;
  serve(o);
  std::vector<std::unique_ptr<Wire>> held;
  for (int i = 0; i < 8; ++i) held.push_back(std::make_unique<Wire>(port()));
  Wire extra(port());  // accepted after the eight (one accept at a time, in order)
  ASSERT_TRUE(extra.ok());  // the kernel accepts it; the server closes it at once
  extra.send(http_get("/health"));
  EXPECT_TRUE(extra.wait_closed());
  EXPECT_EQ(extra.buffer(), "");
  held.pop_back();  // a slot frees: served again
  Reply h;
  for (int i = 0; i < 100 && h.status != 200; ++i) {
    h = get(port(), "/health");
    if (h.status != 200) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_EQ(h.status, 200);
  // The /health connection just closed may still count against the limit until the server
  // sees its end (asynchronously): the /metrics request may be refused once; ask again.
  Reply m;
  for (int i = 0; i < 100 && m.status != 200; ++i) {
    m = get(port(), "/metrics");
    if (m.status != 200) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ASSERT_EQ(m.status, 200);
  EXPECT_GE(parse_prometheus(m.body)["ubatch_http_connections_refused_total"], 1);
}

TEST_F(ServerTransport, DrainAnswersHealth503AndLetsRunningStreamsFinish) {
  serve(tiny_options());
  Wire stream(port());
  ASSERT_TRUE(stream.send(http_post("/v1/completions", R"({"prompt": "a", "max_tokens": 400, "ignore_eos": true,
                                                            "temperature": 0, "stream": true})")));
  ASSERT_TRUE(stream.wait_for("data: "));
  Wire idle(port());
  ASSERT_TRUE(idle.send(http_get("/health")));
  EXPECT_EQ(idle.next_response().status, 200);
  served_->http->drain();
  EXPECT_TRUE(idle.wait_closed());  // an idle keep-alive connection closes
  Reply h = get(port(), "/health");
  EXPECT_EQ(h.status, 503);
  EXPECT_EQ(h.parsed()["status"], "draining");
  ASSERT_TRUE(h.headers.find("Connection") != h.headers.end());
  EXPECT_EQ(h.headers.find("Connection")->second, "close");
  EXPECT_EQ(h.headers.count("Retry-After"), 1u);  // every 503 says when to come back
  Reply refused = post(port(), "/v1/completions", kCompletion);
  EXPECT_EQ(refused.status, 503);
  EXPECT_EQ(refused.headers.count("Retry-After"), 1u);
  EXPECT_EQ(metrics(port())["ubatch_draining"], 1);
  // The running stream goes on to its end.
  Wire::Response r = stream.next_response(300);
  EXPECT_EQ(r.status, 200);
  std::vector<std::string> frames = sse_payloads(r.body);
  ASSERT_FALSE(frames.empty());
  EXPECT_EQ(frames.back(), "[DONE]");
  EXPECT_EQ(r.body.find("shutting_down"), std::string::npos);
  EXPECT_TRUE(served_->http->wait_idle(std::chrono::seconds(60)));
  EXPECT_TRUE(stream.wait_closed());
}

TEST_F(ServerTransport, StopEndsARunningStreamWithAFinalErrorEvent) {
  serve(tiny_options());
  Wire stream(port());
  ASSERT_TRUE(stream.send(http_post("/v1/completions", R"({"prompt": "a", "max_tokens": 1900, "ignore_eos": true,
                                                            "temperature": 0, "stream": true})")));
  ASSERT_TRUE(stream.wait_for("data: "));
  Wire waiting(port());  // a non-streamed request waiting for its answer
  ASSERT_TRUE(waiting.send(http_post("/v1/completions", R"({"prompt": "b", "max_tokens": 1900, "ignore_eos": true})")));
  for (int i = 0; i < 400 && served_->http->requests_in_flight() < 2; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  served_->http->stop();
  Wire::Response r = stream.next_response(60);
  EXPECT_EQ(r.status, 200);
  std::vector<std::string> frames = sse_payloads(r.body);
  ASSERT_GE(frames.size(), 2u);
  EXPECT_EQ(frames.back(), "[DONE]");
  EXPECT_EQ(json::parse(frames[frames.size() - 2], nullptr, false)["error"]["code"], "shutting_down") << r.body;
  Wire::Response w = waiting.next_response(60);
  EXPECT_EQ(w.status, 503);
  EXPECT_EQ(w.headers.count("Retry-After"), 1u);
  EXPECT_TRUE(stream.wait_closed());
  EXPECT_TRUE(waiting.wait_closed());
}

// HTTP/1.0 knows no chunked coding: a stream's body ends when the server closes the
// connection, so its head has neither Content-Length nor Transfer-Encoding (a head saying
// "Content-Length: 0" made nginx's default proxy_pass, which speaks HTTP/1.0 upstream, keep
// an empty body). Whole responses keep their exact Content-Length, and keep-alive when asked.
TEST_F(ServerTransport, Http10StreamsEndWithTheConnectionAndWholeResponsesKeepTheirLength) {
  serve(tiny_options());
  const std::string streamed = R"({"prompt": "hello", "max_tokens": 8, "temperature": 0, "stream": true})";
  Wire s(port());
  ASSERT_TRUE(s.send("POST /v1/completions HTTP/1.0\r\nContent-Type: application/json\r\nContent-Length: " +
                     std::to_string(streamed.size()) + "\r\n\r\n" + streamed));
  ASSERT_TRUE(s.wait_closed(120));
  const std::string& in = s.buffer();
  const size_t head_end = in.find("\r\n\r\n");
  ASSERT_NE(head_end, std::string::npos) << in;
  const std::string head = in.substr(0, head_end + 2);
  EXPECT_EQ(head.rfind("HTTP/1.1 200 OK\r\n", 0), 0u) << head;
  EXPECT_EQ(head.find("Content-Length"), std::string::npos) << head;
  EXPECT_EQ(head.find("Transfer-Encoding"), std::string::npos) << head;
  EXPECT_NE(head.find("\r\nConnection: close\r\n"), std::string::npos) << head;
  EXPECT_NE(head.find("Content-Type: text/event-stream"), std::string::npos) << head;
  std::vector<std::string> frames = sse_payloads(in.substr(head_end + 4));
  ASSERT_GE(frames.size(), 2u);
  EXPECT_EQ(frames.back(), "[DONE]");
  std::string text;
  for (size_t i = 0; i + 1 < frames.size(); ++i) text += json::parse(frames[i])["choices"][0]["text"].get<std::string>();
  // The same text as the same request over HTTP/1.1, unstreamed.
  json plain = json::parse(streamed);
  plain["stream"] = false;
  Reply whole = post(port(), "/v1/completions", plain.dump());
  ASSERT_EQ(whole.status, 200);
  EXPECT_EQ(text, whole.parsed()["choices"][0]["text"]);

  // Unstreamed over HTTP/1.0 with keep-alive: exact length, and the connection serves another.
  Wire k(port());
  const std::string req = "POST /v1/completions HTTP/1.0\r\nConnection: keep-alive\r\nContent-Type: application/json\r\n"
                          "Content-Length: " + std::to_string(plain.dump().size()) + "\r\n\r\n" + plain.dump();
  for (int i = 0; i < 2; ++i) {
    ASSERT_TRUE(k.send(req));
    Wire::Response r = k.next_response(120);
    ASSERT_EQ(r.status, 200);
    ASSERT_EQ(r.headers.count("Content-Length"), 1u);
    EXPECT_EQ(std::stoul(r.headers.find("Content-Length")->second), r.body.size());
    EXPECT_EQ(r.headers.find("Connection")->second, "keep-alive");
    EXPECT_EQ(json::parse(r.body)["choices"][0]["text"], whole.parsed()["choices"][0]["text"]);
  }
  // Without keep-alive (HTTP/1.0's default) the server closes after the response.
  Wire c(port());
  ASSERT_TRUE(c.send("GET /health HTTP/1.0\r\n\r\n"));
  Wire::Response h = c.next_response(60);
  EXPECT_EQ(h.status, 200);
  EXPECT_EQ(std::stoul(h.headers.find("Content-Length")->second), h.body.size());
  EXPECT_EQ(h.headers.find("Connection")->second, "close");
  EXPECT_TRUE(c.wait_closed());
}

// server::SseStream on a bare transport (no model): a route whose first event comes only when
// the test says so. Until then the stream sends its head, then ": keep-alive" at every silent
// interval; the same after an event; none at all with keep-alive off.
class SseRoute {
 public:
  explicit SseRoute(std::chrono::milliseconds keepalive) {
    server::http::Router router;
    router.add("GET", "/events", [this, keepalive](const std::shared_ptr<server::http::Exchange>& ex) {
      server::http::Response head;
      head.set_header("Content-Type", std::string(server::kSseContentType));
      auto sse = std::make_shared<server::SseStream>(ex, head, keepalive);
      sse->arm();
      std::lock_guard<std::mutex> lock(mutex_);
      ex_ = ex;
      sse_ = sse;
    });
    http_ = std::make_unique<server::http::Server>(server::http::Limits{}, server::http::CorsPolicy{}, std::move(router),
                                                   server::http::Hooks{});
    port_ = http_->bind("127.0.0.1", 0).value();
    EXPECT_TRUE(http_->start());
  }
  ~SseRoute() {
    // The last references to the exchange (and so its connection's socket) go on its strand.
    std::shared_ptr<server::http::Exchange> ex;
    std::shared_ptr<server::SseStream> sse;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      ex = std::move(ex_);
      sse = std::move(sse_);
    }
    if (ex) ex->post([ex, sse] {});
    sse.reset();
    ex.reset();
    http_->stop();
  }
  int port() const { return port_; }
  // Runs fn(stream) on the exchange's strand (the request must have arrived).
  void on_stream(std::function<void(server::SseStream&)> fn) {
    std::shared_ptr<server::http::Exchange> ex;
    for (int i = 0; i < 2000 && !ex; ++i) {
      {
        std::lock_guard<std::mutex> lock(mutex_);
        ex = ex_;
      }
      if (!ex) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    ASSERT_TRUE(ex);
    std::shared_ptr<server::SseStream> sse;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      sse = sse_;
    }
    ex->post([sse, fn] { fn(*sse); });
  }

 private:
  std::mutex mutex_;
  std::shared_ptr<server::http::Exchange> ex_;
  std::shared_ptr<server::SseStream> sse_;
  std::unique_ptr<server::http::Server> http_;
  int port_ = -1;
};

TEST(ServerSse, ASilentStreamSendsItsHeadThenKeepAliveCommentsAtEverySilence) {
  SseRoute route(std::chrono::milliseconds(50));
  Wire w(route.port());
  ASSERT_TRUE(w.send(http_get("/events")));
  // Head and comments (each in its own chunk), no event yet.
  const std::string comment(server::kSseKeepAlive);
  auto count = [&](size_t from) {
    int n = 0;
    for (size_t p = w.buffer().find(comment, from); p != std::string::npos; p = w.buffer().find(comment, p + 1)) ++n;
    return n;
  };
  for (auto until = Clock::now() + std::chrono::seconds(60); count(0) < 2 && Clock::now() < until;) w.pump(50);
  ASSERT_GE(count(0), 2) << w.buffer();
  EXPECT_EQ(w.buffer().find("data: "), std::string::npos);
  EXPECT_EQ(w.buffer().rfind("HTTP/1.1 200 OK\r\n", 0), 0u) << w.buffer();
  EXPECT_NE(w.buffer().find("Transfer-Encoding: chunked"), std::string::npos);
  route.on_stream([](server::SseStream& s) { s.write("data: 1\n\n"); });
  ASSERT_TRUE(w.wait_for("data: 1\n\n", 60));
  const size_t after = w.buffer().find("data: 1\n\n");
  // Silent again after an event (a preempted stream): comments again.
  for (auto until = Clock::now() + std::chrono::seconds(60); count(after) < 1 && Clock::now() < until;) w.pump(50);
  EXPECT_GE(count(after), 1);
  std::atomic<int> keepalives{-1};
  route.on_stream([&keepalives](server::SseStream& s) {
    keepalives = s.keepalives();
    s.write(server::kSseDone);
    s.end();
  });
  // The whole response (the buffer still holds it from its first byte): events and comments.
  Wire::Response r = w.next_response(60);
  ASSERT_EQ(r.status, 200);
  int comments = 0;
  EXPECT_EQ(sse_payloads(r.body, &comments), (std::vector<std::string>{"1", "[DONE]"}));
  EXPECT_GE(comments, 3);
  EXPECT_EQ(comments, keepalives.load());
}

TEST(ServerSse, KeepAliveOffSendsNothingBeforeTheFirstEvent) {
  SseRoute route(std::chrono::milliseconds(0));
  Wire w(route.port());
  ASSERT_TRUE(w.send(http_get("/events")));
  for (int i = 0; i < 6; ++i) w.pump(50);
  EXPECT_TRUE(w.buffer().empty()) << w.buffer();
  route.on_stream([](server::SseStream& s) {
    EXPECT_FALSE(s.started());
    s.end();  // an empty stream is still a whole response
    EXPECT_TRUE(s.started());
    EXPECT_EQ(s.keepalives(), 0);
  });
  Wire::Response r = w.next_response(60);
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.body, "");
}

}  // namespace
}  // namespace ubatch::test
