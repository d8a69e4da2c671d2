// Hardening against the vulnerability classes of issue 31 (docs/SECURITY.md): heavy but valid
// requests — a logit_bias of 100,000 entries, a wide JSON Schema, a megabyte to tokenize, a long
// chat to render — run off the HTTP I/O threads, so /health answers in milliseconds while they
// run (it took 34 s with three 100,000-entry logit_bias requests when their handling was
// quadratic and ran on the I/O threads); logit_bias is bounded (--max-logit-bias, one entry per
// token at most, each token once); objects wider than kMaxOrderedObjectMembers in the ordered
// parts of a body are refused.
#include "test_server_fixture.h"

#include <atomic>
#include <future>

#include "server/json_request.h"
#include "server/structured_output.h"

namespace ubatch::test {
namespace {

using Clock = std::chrono::steady_clock;

// `n` distinct token ids in [0, n_vocab), biased by -1.
json wide_logit_bias(int n, int n_vocab) {
  json lb = json::object();
  for (int i = 0; i < n; ++i) lb[std::to_string((i * 7919) % n_vocab)] = -1.0;
  return lb;
}

// Polls /health on one kept-alive connection until `stop`, recording each answer's latency.
struct HealthPoller {
  std::atomic<bool> stop{false};
  std::future<std::vector<double>> latencies_ms;
  int bad_status = 0;
  explicit HealthPoller(int port) {
    latencies_ms = std::async(std::launch::async, [this, port] {
      std::vector<double> out;
      std::unique_ptr<loadgen::HttpClient> c = client(port);
      while (!stop) {
        loadgen::HttpReply reply;
        const auto t0 = Clock::now();
        const bool ok = c->request("GET", "/health", {}, "", reply).ok();
        out.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
        if (!ok || reply.status != 200) ++bad_status;
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
      }
      return out;
    });
  }
};

TEST(ServerHardening, HeavyRequestsLeaveHealthFast) {
  UBATCH_REQUIRE_DEFAULT_MODEL();
  ServeOptions o;
  o.n_ctx = 1024;
  o.n_threads = 1;
  o.engine.n_batch = 64;
  std::unique_ptr<ServedModel> s = serve_model(default_model(), o);
  ASSERT_NE(s, nullptr);
  const int n_vocab = s->tokenizer->n_vocab();
  ASSERT_GE(n_vocab, 100000);
  const json lb = wide_logit_bias(100000, n_vocab);
  json schema = {{"type", "object"}, {"properties", json::object()}, {"required", json::array()}};
  for (int i = 0; i < 300; ++i) {
    schema["properties"]["field_" + std::to_string(i)] = {{"type", "string"}, {"maxLength", 8}};
    schema["required"].push_back("field_" + std::to_string(i));
  }
  json messages = json::array();
  for (int i = 0; i < 2000; ++i)
    messages.push_back({{"role", i % 2 ? "assistant" : "user"}, {"content", "turn " + std::to_string(i)}});
  struct Heavy {
    std::string what, path, body;
  };
  const std::vector<Heavy> heavy = {
      {"completion, 100,000-entry logit_bias", "/v1/completions",
       json{{"prompt", "Hello"}, {"max_tokens", 1}, {"logit_bias", lb}}.dump()},
      {"chat, 100,000-entry logit_bias", "/v1/chat/completions",
       json{{"messages", {{{"role", "user"}, {"content", "Hi"}}}}, {"max_tokens", 1}, {"logit_bias", lb}}.dump()},
      {"completion, 100,000-entry logit_bias again", "/v1/completions",
       json{{"prompt", "Hi"}, {"max_tokens", 1}, {"logit_bias", lb}}.dump()},
      {"json_schema of 300 properties", "/v1/completions",
       json{{"prompt", "A record:"}, {"max_tokens", 1}, {"json_schema", schema}}.dump()},
      {"tokenize 1 MB", "/tokenize", json{{"content", std::string(1u << 20, 'x')}}.dump()},
      {"apply-template, 2,000 messages", "/apply-template", json{{"messages", messages}}.dump()},
  };
  HealthPoller poller(s->port);
  std::this_thread::sleep_for(std::chrono::milliseconds(50));  // a few polls before the load
  std::vector<std::future<std::pair<int, double>>> sent;
  for (const Heavy& h : heavy)
    sent.push_back(std::async(std::launch::async, [&s, &h] {
      const auto t0 = Clock::now();
      const Reply r = post(s->port, h.path, h.body);
      return std::pair<int, double>(r.status, std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
    }));
  for (size_t i = 0; i < sent.size(); ++i) {
    const auto [status, ms] = sent[i].get();
    EXPECT_EQ(status, 200) << heavy[i].what;
    std::printf("  %-45s %4d in %7.1f ms\n", heavy[i].what.c_str(), status, ms);
  }
  poller.stop = true;
  const std::vector<double> lat = poller.latencies_ms.get();
  ASSERT_GE(lat.size(), 3u);
  const double worst = *std::max_element(lat.begin(), lat.end());
  std::printf("  /health: %zu polls during the load, worst %.1f ms\n", lat.size(), worst);
  EXPECT_EQ(poller.bad_status, 0);
  // "Held up" would be the length of a heavy request (0.2-20 s); under ThreadSanitizer, with
  // every thread 5-15x slower and the other shards on the same cores, scheduling alone reached
  // 100.1 ms once, so the bound there is 1 s (that stage looks for races, not latency).
#if defined(__SANITIZE_THREAD__)
  constexpr double kBoundMs = 1000.0;
#else
  constexpr double kBoundMs = 100.0;
#endif
  EXPECT_LT(worst, kBoundMs) << "/health was held up while heavy requests ran";
}

TEST(ServerHardening, LogitBiasIsBoundedAndEachTokenCountsOnce) {
  UBATCH_REQUIRE_TINY_MODEL();
  ServeOptions o;
  o.server.max_logit_bias = 100;
  o.engine.n_batch = 64;
  o.n_ctx = 256;
  std::unique_ptr<ServedModel> s = serve_model(tiny_model(), o);
  ASSERT_NE(s, nullptr);
  auto with_bias = [](const json& lb) { return json{{"prompt", "a"}, {"max_tokens", 2}, {"logit_bias", lb}}.dump(); };
  EXPECT_EQ(post(s->port, "/v1/completions", with_bias(wide_logit_bias(100, 512))).status, 200);
  const Reply over = post(s->port, "/v1/completions", with_bias(wide_logit_bias(101, 512)));
  EXPECT_EQ(over.status, 400) << over.body;
  EXPECT_NE(over.body.find("--max-logit-bias"), std::string::npos) << over.body;
  const Reply twice = post(s->port, "/v1/completions", with_bias({{"5", 1}, {"05", 2}}));
  EXPECT_EQ(twice.status, 400) << twice.body;
  EXPECT_NE(twice.body.find("names token 5 twice"), std::string::npos) << twice.body;
}

// The parts of a body parsed as ordered JSON (chat messages, tools, schemas) refuse an object
// wider than kMaxOrderedObjectMembers (their member lookup is linear); elsewhere (an unknown
// field) a wide object costs nothing more than the body's parse.
TEST(ServerHardening, WideObjectsInOrderedPartsAreRefused) {
  UBATCH_REQUIRE_TINY_MODEL();
  ServeOptions o;
  o.engine.n_batch = 64;
  o.n_ctx = 256;
  std::unique_ptr<ServedModel> s = serve_model(tiny_model(), o);
  ASSERT_NE(s, nullptr);
  json wide = json::object();
  for (size_t i = 0; i <= server::kMaxOrderedObjectMembers; ++i) wide["k" + std::to_string(i)] = i;
  json msg = {{"role", "user"}, {"content", "hi"}, {"extra", wide}};
  const Reply chat = post(s->port, "/v1/chat/completions", json{{"messages", {msg}}, {"max_tokens", 1}}.dump());
  EXPECT_EQ(chat.status, 400) << chat.body;
  EXPECT_NE(chat.body.find("more than 4096 members"), std::string::npos) << chat.body;
  const Reply schema = post(s->port, "/v1/completions",
                            json{{"prompt", "a"}, {"max_tokens", 1},
                                 {"json_schema", {{"type", "object"}, {"properties", wide}}}}.dump());
  EXPECT_EQ(schema.status, 400) << schema.body;
  EXPECT_EQ(schema.parsed()["error"]["param"], "json_schema") << schema.body;
  // A grammar longer than kMaxConstraintBytes is refused before it is compiled.
  const Reply grammar = post(s->port, "/v1/completions",
                             json{{"prompt", "a"}, {"max_tokens", 1},
                                  {"grammar", "root ::= \"" + std::string(server::kMaxConstraintBytes, 'a') + "\""}}.dump());
  EXPECT_EQ(grammar.status, 400) << grammar.body.substr(0, 300);
  EXPECT_EQ(grammar.parsed()["error"]["param"], "grammar") << grammar.body.substr(0, 300);
  // An unknown top-level field is never built as ordered JSON.
  const Reply unknown = post(s->port, "/v1/completions",
                             json{{"prompt", "a"}, {"max_tokens", 1}, {"unknown_field", wide}}.dump());
  EXPECT_EQ(unknown.status, 200) << unknown.body;
}

}  // namespace
}  // namespace ubatch::test
