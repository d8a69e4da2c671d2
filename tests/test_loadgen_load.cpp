// The load driver (loadgen/load_driver.h) against an in-process fake OpenAI-style server on
// loopback: closed and open loops, usage vs chunk counting, errors by kind, request mix and
// JSONL prompts. (The run against the real `ubatch serve` is in test_bench_serve.cpp.)
#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <atomic>
#include <mutex>
#include <netinet/in.h>
#include <set>
#include <sys/socket.h>
#include <thread>
#include <unistd.h>

#include "loadgen/load_driver.h"
#include "loadgen/prompts.h"

#include "server/http/server.h"

namespace ubatch::bench {

using namespace ::ubatch::loadgen;
namespace {

using json = nlohmann::json;

// A tiny OpenAI-compatible stand-in: streams max_tokens one-token chunks (a few ms apart,
// data and blank line in separate writes), then usage (when asked for and enabled) and
// [DONE]. /busy answers 503 with an OpenAI error body; /cut stops without [DONE]; /deadline
// answers requests with a deadline_ms by turns with a 504, a 503 deadline_unattainable, and a
// stream that ends with finish_reason "deadline" (the ways ubatch serve reports a missed
// deadline), and streams the others.
class FakeServer {
 public:
  explicit FakeServer(bool with_usage = true) : with_usage_(with_usage) {
    namespace http = server::http;
    http::Router router;
    router.post_async("/v1/completions", [this](const std::shared_ptr<http::Exchange>& ex) { stream(ex, false); });
    router.post_async("/v1/chat/completions", [this](const std::shared_ptr<http::Exchange>& ex) { stream(ex, true); });
    router.post_async("/cut", [this](const std::shared_ptr<http::Exchange>& ex) { stream(ex, false, true); });
    router.post_async("/deadline", [this](const std::shared_ptr<http::Exchange>& ex) {
      json body = json::parse(ex->request().body, nullptr, false);
      if (!body.is_object() || !body.contains("deadline_ms")) return stream(ex, false);
      http::Response r;
      switch (deadline_turn_++ % 3) {
        case 0:
          r.status = 504;
          r.set_content(R"({"error":{"message":"deadline passed","type":"deadline_exceeded","code":"deadline_exceeded"}})",
                        "application/json");
          return ex->respond(std::move(r));
        case 1:
          r.status = 503;
          r.set_content(R"({"error":{"message":"cannot be met","type":"unavailable_error","code":"deadline_unattainable"}})",
                        "application/json");
          return ex->respond(std::move(r));
        default:
          return stream(ex, false, false, "deadline");
      }
    });
    router.post("/busy", [](const http::Request&, http::Response& r) {
      r.status = 503;
      r.set_header("Retry-After", "1");
      r.set_content(R"({"error":{"message":"queue full","type":"overloaded"}})", "application/json");
    });
    svr_ = std::make_unique<http::Server>(http::Limits{}, http::CorsPolicy{}, std::move(router), http::Hooks{});
    port_ = svr_->bind("127.0.0.1", 0).value();
    EXPECT_TRUE(svr_->start());
  }
  ~FakeServer() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      for (std::thread& t : writers_) t.join();
    }
    svr_->stop();
  }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }
  std::vector<json> bodies() {
    std::lock_guard<std::mutex> lock(mutex_);
    return bodies_;
  }
  std::vector<std::string> auth() {
    std::lock_guard<std::mutex> lock(mutex_);
    return auth_;
  }

 private:
  // The stream is written from its own thread, a few ms between writes, through
  // Exchange::post (the exchange is only touched on its connection's strand).
  void stream(const std::shared_ptr<server::http::Exchange>& ex, bool chat, bool cut = false,
              const std::string& finish_reason = "") {
    json body = json::parse(ex->request().body, nullptr, false);
    std::lock_guard<std::mutex> lock(mutex_);
    bodies_.push_back(body);
    auth_.push_back(ex->request().get_header_value("Authorization"));
    const int n = body.is_object() && body.contains("max_tokens") ? body["max_tokens"].get<int>() : 4;
    const bool usage = with_usage_ && body.is_object() && body.contains("stream_options") &&
                       body["stream_options"].value("include_usage", false);
    server::http::Response head;
    head.set_header("Content-Type", "text/event-stream");
    ex->start_stream(std::move(head));
    writers_.emplace_back([ex, n, usage, chat, cut, finish_reason] {
      auto write = [&ex](std::string bytes) { ex->post([ex, bytes] { ex->write(bytes); }); };
      for (int i = 0; i < n; ++i) {
        json chunk = chat ? json{{"choices", {{{"index", 0}, {"delta", {{"content", "w"}}}}}}}
                          : json{{"choices", {{{"index", 0}, {"text", "w"}}}}};
        write("data: " + chunk.dump() + "\n");
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
        write("\n");
      }
      if (!cut) {
        std::string tail;
        if (!finish_reason.empty())
          tail += "data: " + json{{"choices", {{{"index", 0}, {"text", ""}, {"finish_reason", finish_reason}}}}}.dump() +
                  "\n\n";
        if (usage)
          tail += "data: " + json{{"choices", json::array()}, {"usage", {{"prompt_tokens", 3}, {"completion_tokens", n}}}}.dump() + "\n\n";
        tail += "data: [DONE]\n\n";
        write(tail);
      }
      ex->post([ex] { ex->end_stream(); });
    });
  }

  bool with_usage_;
  std::atomic<int> deadline_turn_{0};
  std::unique_ptr<server::http::Server> svr_;
  int port_ = 0;
  std::mutex mutex_;
  std::vector<std::thread> writers_;
  std::vector<json> bodies_;
  std::vector<std::string> auth_;
};

LoadConfig base_config(const std::string& url) {
  LoadConfig c;
  c.endpoint.url = url;
  c.endpoint.timeout_s = 30;
  return c;
}

TEST(BenchLoad, ClosedLoopCompletesEveryRequestOnce) {
  FakeServer server;
  LoadConfig c = base_config(server.url());
  c.users = 3;
  c.n_requests = 12;
  c.endpoint.api_key = "sk-test";
  c.endpoint.model = "tiny";
  const RequestMix mix(5, {4, 9}, {2, 5});
  int progress_calls = 0;
  Result<LoadReport> r = run_load(c, mix, [&](const Progress& p) {
    ++progress_calls;
    EXPECT_LE(p.completed + p.errors, 12);
  });
  ASSERT_TRUE(r) << r.message();
  EXPECT_EQ(r->mode, "closed");
  EXPECT_EQ(r->n_started, 12);
  EXPECT_EQ(r->n_completed, 12);
  EXPECT_EQ(r->n_errors, 0) << format_text(r.value());
  EXPECT_GE(progress_calls, 1);
  std::set<int64_t> seen;
  int64_t expected_tokens = 0;
  for (const RequestResult& q : r->requests) {
    seen.insert(q.index);
    EXPECT_TRUE(q.usage_reported);
    EXPECT_EQ(q.n_output_tokens, mix.make(q.index).max_tokens);
    EXPECT_EQ(q.n_prompt_tokens, 3);
    EXPECT_GE(q.ttft_ms, 0);
    EXPECT_GE(q.e2e_ms, q.ttft_ms);
    EXPECT_EQ(q.itl_ms.size(), static_cast<size_t>(q.n_output_tokens - 1));
    expected_tokens += q.n_output_tokens;
  }
  EXPECT_EQ(seen.size(), 12u);
  EXPECT_EQ(*seen.begin(), 0);
  EXPECT_EQ(*seen.rbegin(), 11);
  EXPECT_EQ(r->n_output_tokens, expected_tokens);
  EXPECT_EQ(r->ttft_ms.n, 12u);
  // What the server received: the mix's prompts, the model name, the key.
  std::vector<json> bodies = server.bodies();
  ASSERT_EQ(bodies.size(), 12u);
  std::set<std::string> prompts;
  for (int64_t i = 0; i < 12; ++i) prompts.insert(mix.make(i).prompt);
  for (const json& b : bodies) {
    EXPECT_EQ(b["model"], "tiny");
    EXPECT_EQ(b["stream"], true);
    EXPECT_TRUE(prompts.count(b["prompt"].get<std::string>()));
  }
  for (const std::string& a : server.auth()) EXPECT_EQ(a, "Bearer sk-test");
}

TEST(BenchLoad, ChatEndpointCountsChunksWithoutUsage) {
  FakeServer server(/*with_usage=*/false);
  LoadConfig c = base_config(server.url());
  c.endpoint.endpoint = "/v1/chat/completions";
  c.users = 2;
  c.n_requests = 4;
  c.think_ms = 1;
  const RequestMix mix(1, {3, 3}, {6, 6});
  Result<LoadReport> r = run_load(c, mix);
  ASSERT_TRUE(r) << r.message();
  EXPECT_EQ(r->n_completed, 4);
  EXPECT_EQ(r->n_usage_reported, 0);
  EXPECT_EQ(r->n_output_tokens, 24);
  for (const json& b : server.bodies()) EXPECT_TRUE(b.contains("messages"));
}

TEST(BenchLoad, OpenLoop) {
  FakeServer server;
  LoadConfig c = base_config(server.url());
  c.rate = 50;
  c.n_requests = 8;
  Result<LoadReport> r = run_load(c, RequestMix(2, {2, 4}, {1, 3}));
  ASSERT_TRUE(r) << r.message();
  EXPECT_EQ(r->mode, "open");
  EXPECT_EQ(r->n_started + r->n_dropped, 8);
  EXPECT_EQ(r->n_completed, r->n_started);
  EXPECT_EQ(r->n_errors, 0);
  EXPECT_EQ(server.bodies().size(), static_cast<size_t>(r->n_started));
}

TEST(BenchLoad, DurationStopsStartingRequests) {
  FakeServer server;
  LoadConfig c = base_config(server.url());
  c.users = 2;
  c.duration_s = 0.3;
  Result<LoadReport> r = run_load(c, RequestMix(3, {2, 2}, {2, 2}));
  ASSERT_TRUE(r) << r.message();
  EXPECT_GT(r->n_completed, 0);
  EXPECT_EQ(r->n_errors, 0);
  EXPECT_EQ(r->n_completed, r->n_started);
}

TEST(BenchLoad, ErrorsAreCountedByKind) {
  FakeServer server;
  LoadConfig c = base_config(server.url());
  c.endpoint.endpoint = "/busy";
  c.users = 2;
  c.n_requests = 4;
  Result<LoadReport> r = run_load(c, RequestMix(1, {1, 1}, {1, 1}));
  ASSERT_TRUE(r) << r.message();
  EXPECT_EQ(r->n_completed, 0);
  EXPECT_EQ(r->n_errors, 4);
  EXPECT_EQ(r->errors["http_503"], 4);
  EXPECT_NE(r->error_examples["http_503"].find("queue full"), std::string::npos) << r->error_examples["http_503"];
  for (const RequestResult& q : r->requests) EXPECT_EQ(q.status, 503);

  c.endpoint.endpoint = "/cut";
  r = run_load(c, RequestMix(1, {1, 1}, {2, 2}));
  ASSERT_TRUE(r) << r.message();
  EXPECT_EQ(r->errors["incomplete"], 4);

  c.endpoint.endpoint = "/no-such-route";
  r = run_load(c, RequestMix(1, {1, 1}, {2, 2}));
  ASSERT_TRUE(r) << r.message();
  EXPECT_EQ(r->errors["http_404"], 4);
}

TEST(BenchLoad, UrgentClassIsSeededSentAndLeavesTheRestOfTheMix) {
  const RequestMix plain(9, {4, 30}, {2, 40});
  const RequestMix mixed(9, {4, 30}, {2, 40}, {}, UrgentClass{0.2, 10, 5000});
  EXPECT_FALSE(plain.has_urgent_class());
  EXPECT_TRUE(mixed.has_urgent_class());
  EndpointConfig ep;
  int urgent = 0;
  for (int64_t i = 0; i < 2000; ++i) {
    const RequestSpec a = plain.make(i), b = mixed.make(i);
    EXPECT_EQ(a.prompt, b.prompt);
    EXPECT_EQ(a.max_tokens, b.max_tokens);
    EXPECT_FALSE(a.urgent);
    const RequestSpec again = mixed.make(i);
    EXPECT_EQ(again.urgent, b.urgent);  // a pure function of (seed, index)
    const json body = request_body(ep, b);
    if (b.urgent) {
      ++urgent;
      EXPECT_EQ(body["priority"], 10);
      EXPECT_EQ(body["deadline_ms"], 5000);
    } else {
      EXPECT_FALSE(body.contains("priority"));
      EXPECT_FALSE(body.contains("deadline_ms"));
    }
  }
  EXPECT_GT(urgent, 2000 * 0.16);
  EXPECT_LT(urgent, 2000 * 0.24);
}

TEST(BenchLoad, DeadlineOutcomesAreMissesNotLostRequests) {
  FakeServer server;
  LoadConfig c = base_config(server.url());
  c.endpoint.endpoint = "/deadline";
  c.users = 3;
  c.n_requests = 60;
  Result<LoadReport> r = run_load(c, RequestMix(4, {2, 4}, {2, 3}, {}, UrgentClass{0.5, 10, 800}));
  ASSERT_TRUE(r) << r.message();
  EXPECT_TRUE(r->has_classes);
  const ClassReport& u = r->urgent;
  const ClassReport& n = r->normal;
  EXPECT_EQ(u.n_started + n.n_started, 60);
  EXPECT_GT(u.n_started, 10);
  EXPECT_EQ(u.n_with_deadline, u.n_started);
  EXPECT_EQ(u.n_deadline_missed, u.n_started);  // every one of the three outcomes is a miss
  EXPECT_DOUBLE_EQ(u.deadline_miss_rate(), 1.0);
  EXPECT_EQ(u.n_lost, 0);
  EXPECT_EQ(n.n_completed, n.n_started);
  EXPECT_EQ(n.n_with_deadline, 0);
  EXPECT_EQ(n.n_deadline_missed, 0);
  EXPECT_EQ(r->n_lost, 0);
  EXPECT_EQ(r->errors["http_504"] + r->errors["http_503"], u.n_errors);
  for (const RequestResult& q : r->requests) {
    if (q.status == 503) {
      EXPECT_EQ(q.error_code, "deadline_unattainable");
    }
  }
  const json j = to_json(r.value(), true);
  EXPECT_EQ(j["classes"]["urgent"]["deadline_missed"], u.n_deadline_missed);
  EXPECT_EQ(j["lost"], 0);
  EXPECT_NE(format_text(r.value()).find("urgent"), std::string::npos);
  // Errors that are no deadline outcome are lost requests.
  c.endpoint.endpoint = "/busy";
  c.n_requests = 10;
  r = run_load(c, RequestMix(4, {2, 4}, {2, 3}, {}, UrgentClass{0.5, 10, 800}));
  ASSERT_TRUE(r) << r.message();
  EXPECT_EQ(r->n_lost, 10);
  EXPECT_EQ(r->urgent.n_deadline_missed, 0);
}

TEST(BenchLoad, ConnectionRefused) {
  // A port nobody listens on: bind an ephemeral one, then close it.
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  socklen_t len = sizeof(a);
  ASSERT_EQ(getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len), 0);
  const int port = ntohs(a.sin_port);
  close(fd);
  LoadConfig c = base_config("http://127.0.0.1:" + std::to_string(port));
  c.n_requests = 2;
  Result<LoadReport> r = run_load(c, RequestMix(1, {1, 1}, {1, 1}));
  ASSERT_TRUE(r) << r.message();
  EXPECT_EQ(r->n_errors, 2);
  EXPECT_EQ(r->errors["connect"], 2);
}

// A raw HTTP/1.1 server that answers at most `answer_per_connection` requests on each
// connection (keep-alive, no "Connection: close"), then reads the next request and closes the
// socket without a byte of response: the race a client meets when a server drops a
// kept-alive connection while a request is on its way.
class DroppingServer {
 public:
  explicit DroppingServer(int answer_per_connection, bool answer_only_first_connection = false)
      : answer_(answer_per_connection), first_only_(answer_only_first_connection) {
    fd_ = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof(a));
    socklen_t len = sizeof(a);
    getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len);
    port_ = ntohs(a.sin_port);
    listen(fd_, 16);
    thread_ = std::thread([this] {
      for (;;) {
        const int c = accept(fd_, nullptr, nullptr);
        if (c < 0) return;  // shutdown() below
        const int answer = first_only_ && connections_++ > 0 ? 0 : answer_;
        for (int served = 0;; ++served) {
          if (!read_request(c)) break;
          if (served >= answer) break;  // close with the request unanswered
          const std::string body = "data: {\"choices\":[{\"index\":0,\"text\":\"w\"}]}\n\ndata: [DONE]\n\n";
          const std::string head = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nContent-Length: " +
                                   std::to_string(body.size()) + "\r\n\r\n";
          const std::string all = head + body;
          if (write(c, all.data(), all.size()) != static_cast<ssize_t>(all.size())) break;
        }
        close(c);
      }
    });
  }
  ~DroppingServer() {
    shutdown(fd_, SHUT_RDWR);
    close(fd_);
    thread_.join();
  }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }

 private:
  // Reads one request (headers, then Content-Length bytes of body); false at EOF.
  static bool read_request(int c) {
    std::string buf;
    char tmp[4096];
    size_t end;
    while ((end = buf.find("\r\n\r\n")) == std::string::npos) {
      const ssize_t n = read(c, tmp, sizeof(tmp));
      if (n <= 0) return false;
      buf.append(tmp, static_cast<size_t>(n));
    }
    size_t length = 0;
    const size_t h = buf.find("Content-Length: ");
    if (h != std::string::npos) length = std::stoul(buf.substr(h + 16));
    while (buf.size() < end + 4 + length) {
      const ssize_t n = read(c, tmp, sizeof(tmp));
      if (n <= 0) return false;
      buf.append(tmp, static_cast<size_t>(n));
    }
    return true;
  }

  int answer_;
  bool first_only_;
  int connections_ = 0;
  int fd_ = -1;
  int port_ = 0;
  std::thread thread_;
};

TEST(BenchLoad, ResendsOnceWhenAKeptAliveConnectionWasClosed) {
  DroppingServer server(1);  // every connection serves one request, then drops the next
  LoadConfig c = base_config(server.url());
  c.n_requests = 4;
  Result<LoadReport> r = run_load(c, RequestMix(1, {1, 1}, {1, 1}));
  ASSERT_TRUE(r) << r.message();
  EXPECT_EQ(r->n_errors, 0);
  EXPECT_EQ(r->n_completed, 4);
  EXPECT_EQ(r->n_reconnects, 3);  // requests 2..4 each found the previous connection dropped
  EXPECT_EQ(to_json(*r, false)["reconnects"], 3);
}

TEST(BenchLoad, AServerThatNeverAnswersIsAnErrorWithoutResend) {
  DroppingServer server(0);  // drops every request: no connection ever carried a response
  LoadConfig c = base_config(server.url());
  c.n_requests = 2;
  Result<LoadReport> r = run_load(c, RequestMix(1, {1, 1}, {1, 1}));
  ASSERT_TRUE(r) << r.message();
  EXPECT_EQ(r->n_completed, 0);
  EXPECT_EQ(r->errors["read"], 2);
  EXPECT_EQ(r->n_reconnects, 0);  // a fresh connection is not stale: no resend
}

TEST(BenchLoad, AResendThatFailsAgainIsOneError) {
  // The first request is answered; from then on every request is dropped, on the kept-alive
  // connection and on the new one alike: one resend, then an error, never a loop.
  DroppingServer server(1, /*answer_only_first_connection=*/true);
  LoadConfig c = base_config(server.url());
  c.n_requests = 2;
  Result<LoadReport> r = run_load(c, RequestMix(1, {1, 1}, {1, 1}));
  ASSERT_TRUE(r) << r.message();
  EXPECT_EQ(r->n_completed, 1);
  EXPECT_EQ(r->errors["read"], 1);
  EXPECT_EQ(r->n_reconnects, 1);
}

TEST(BenchLoad, InvalidConfigIsAnError) {
  LoadConfig c;
  c.endpoint.url = "not a url";
  c.n_requests = 1;
  Result<LoadReport> r = run_load(c, RequestMix(1, {1, 1}, {1, 1}));
  EXPECT_FALSE(r);
}

TEST(BenchLoad, RequestMixIsSeededAndInRange) {
  const RequestMix a(42, {5, 9}, {3, 7}), b(42, {5, 9}, {3, 7}), c(43, {5, 9}, {3, 7});
  bool differs = false;
  for (int64_t i = 0; i < 50; ++i) {
    const RequestSpec x = a.make(i), y = b.make(i);
    EXPECT_EQ(x.prompt, y.prompt);
    EXPECT_EQ(x.max_tokens, y.max_tokens);
    EXPECT_EQ(x.index, i);
    const size_t words = static_cast<size_t>(std::count(x.prompt.begin(), x.prompt.end(), ' ')) + 1;
    EXPECT_GE(words, 5u);
    EXPECT_LE(words, 9u);
    EXPECT_GE(x.max_tokens, 3);
    EXPECT_LE(x.max_tokens, 7);
    if (c.make(i).prompt != x.prompt) differs = true;
  }
  EXPECT_TRUE(differs);
  EXPECT_NE(a.make(0).prompt, a.make(1).prompt);
}

TEST(BenchLoad, JsonlPrompts) {
  auto p = parse_prompts_jsonl("{\"prompt\": \"one\", \"max_tokens\": 4}\n\n{\"prompt\": \"two\"}\r\n", "p.jsonl");
  ASSERT_TRUE(p) << p.message();
  ASSERT_EQ(p->size(), 2u);
  EXPECT_EQ((*p)[0].prompt, "one");
  EXPECT_EQ((*p)[0].max_tokens, 4);
  EXPECT_EQ((*p)[1].max_tokens, -1);
  const RequestMix mix(9, {1, 1}, {10, 12}, p.value());
  std::set<std::string> used;
  for (int64_t i = 0; i < 40; ++i) {
    RequestSpec s = mix.make(i);
    used.insert(s.prompt);
    if (s.prompt == "one") {
      EXPECT_EQ(s.max_tokens, 4);
    } else {
      EXPECT_TRUE(s.max_tokens >= 10 && s.max_tokens <= 12);
    }
  }
  EXPECT_EQ(used.size(), 2u);

  struct Bad {
    const char* text;
    const char* expect;
  } bad[] = {
      {"", "no prompts"},
      {"\n  \n", "no prompts"},
      {"{\"prompt\": \"a\"}\nnot json\n", "p.jsonl:2: not a JSON object"},
      {"[1]\n", "p.jsonl:1: not a JSON object"},
      {"{\"text\": \"a\"}\n", "p.jsonl:1: needs a string field \"prompt\""},
      {"{\"prompt\": 3}\n", "needs a string field"},
      {"{\"prompt\": \"a\", \"max_tokens\": 0}\n", "p.jsonl:1: \"max_tokens\""},
      {"{\"prompt\": \"a\", \"max_tokens\": \"9\"}\n", "\"max_tokens\""},
  };
  for (const Bad& b : bad) {
    auto r = parse_prompts_jsonl(b.text, "p.jsonl");
    ASSERT_FALSE(r) << b.text;
    EXPECT_NE(r.message().find(b.expect), std::string::npos) << r.message();
  }
  EXPECT_FALSE(read_prompts_jsonl("/nonexistent/prompts.jsonl"));
}

}  // namespace
}  // namespace ubatch::bench
