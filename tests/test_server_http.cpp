// The HTTP server on the tiny reference model (fast): every endpoint, every documented
// validation error, API keys, body limits, queue admission, and /metrics in Prometheus
// text format with counters that move by exactly the tokens served.
#include "test_server_fixture.h"

#include <atomic>
#include <random>
#include <future>

#include "server/json_request.h"
#include "server/prometheus.h"

namespace ubatch::test {
namespace {

class ServerHttp : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!std::filesystem::exists(tiny_model())) return;
    ServeOptions o;
    o.server.max_body = 64 * 1024;
    o.server.max_n = 8;
    o.server.max_tokens_cap = 4096;
    o.engine.n_parallel = 2;  // n: 5 must still complete
    o.engine.n_batch = 64;
    o.n_ctx = 512;
    served_ = serve_model(tiny_model(), o).release();
  }
  static void TearDownTestSuite() {
    delete served_;
    served_ = nullptr;
  }
  void SetUp() override {
    UBATCH_REQUIRE_TINY_MODEL();
    ASSERT_NE(served_, nullptr);
  }
  static int port() { return served_->port; }

  void expect_healthy() {
    Reply h = get(port(), "/health");
    EXPECT_EQ(h.status, 200) << "server unhealthy after the previous request";
  }

  static ServedModel* served_;
};
ServedModel* ServerHttp::served_ = nullptr;

TEST_F(ServerHttp, CompletionNonStreaming) {
  Reply r = post(port(), "/v1/completions", R"({"prompt": "hello world", "max_tokens": 8, "temperature": 0})");
  ASSERT_EQ(r.status, 200) << r.body;
  json j = r.parsed();
  EXPECT_EQ(j["object"], "text_completion");
  EXPECT_EQ(j["model"], "test-model");
  EXPECT_TRUE(j["id"].get<std::string>().rfind("cmpl-", 0) == 0);
  ASSERT_EQ(j["choices"].size(), 1u);
  EXPECT_EQ(j["choices"][0]["index"], 0);
  EXPECT_TRUE(j["choices"][0]["text"].is_string());
  EXPECT_TRUE(j["choices"][0]["finish_reason"] == "length" || j["choices"][0]["finish_reason"] == "stop");
  // usage: the prompt as /tokenize counts it with BOS, the completion as generated.
  Reply t = post(port(), "/tokenize", R"({"content": "hello world", "add_special": true})");
  ASSERT_EQ(t.status, 200);
  EXPECT_EQ(j["usage"]["prompt_tokens"], t.parsed()["tokens"].size());
  EXPECT_LE(j["usage"]["completion_tokens"].get<int>(), 8);
  EXPECT_EQ(j["usage"]["total_tokens"].get<int>(),
            j["usage"]["prompt_tokens"].get<int>() + j["usage"]["completion_tokens"].get<int>());
  EXPECT_TRUE(j["usage"]["prompt_tokens_details"]["cached_tokens"].is_number_integer());
  // timings (extension), with the scheduler's decisions: never preempted when alone.
  for (const char* k : {"queue_ms", "ttft_ms", "tpot_ms", "total_ms", "preempted_ms"})
    EXPECT_TRUE(j["timings"][k].is_number()) << k;
  EXPECT_EQ(j["timings"]["preempted"], 0);
}

TEST_F(ServerHttp, StreamEqualsNonStreamForCompletionsAndChat) {
  for (const char* path : {"/v1/completions", "/v1/chat/completions"}) {
    json body = {{"max_tokens", 24}, {"temperature", 0}, {"ignore_eos", true}};
    if (std::string(path) == "/v1/completions")
      body["prompt"] = "Once upon a time";
    else
      body["messages"] = {{{"role", "system"}, {"content", "be brief"}}, {{"role", "user"}, {"content", "hi"}}};
    Reply plain = post(port(), path, body.dump());
    ASSERT_EQ(plain.status, 200) << plain.body;
    json pj = plain.parsed();
    const bool chat = std::string(path) != "/v1/completions";
    const std::string text = chat ? pj["choices"][0]["message"]["content"].get<std::string>()
                                  : pj["choices"][0]["text"].get<std::string>();
    if (chat) {
      EXPECT_EQ(pj["choices"][0]["message"]["role"], "assistant");
    }
    EXPECT_EQ(pj["usage"]["completion_tokens"], 24);

    body["stream"] = true;
    body["stream_options"] = {{"include_usage", true}};
    StreamResult s = post_stream(port(), path, body);
    ASSERT_EQ(s.status, 200);
    EXPECT_TRUE(s.done);
    EXPECT_EQ(s.text[0], text) << path;
    EXPECT_EQ(s.finish[0], "length");
    EXPECT_EQ(s.usage["completion_tokens"], 24);
    EXPECT_EQ(s.usage["prompt_tokens"], pj["usage"]["prompt_tokens"]);
    for (const json& c : s.chunks) EXPECT_EQ(c["object"], chat ? "chat.completion.chunk" : "text_completion");
    if (chat) {
      EXPECT_EQ(s.chunks.front()["choices"][0]["delta"]["role"], "assistant");
    }
  }
}

TEST_F(ServerHttp, PromptAsTokenIdsAndListOfOneString) {
  Reply a = post(port(), "/v1/completions", R"({"prompt": ["hello world"], "max_tokens": 4, "temperature": 0})");
  ASSERT_EQ(a.status, 200) << a.body;
  Reply t = post(port(), "/tokenize", R"({"content": "hello world", "add_special": true})");
  json ids = t.parsed()["tokens"];
  Reply b = post(port(), "/v1/completions", json{{"prompt", ids}, {"max_tokens", 4}, {"temperature", 0}}.dump());
  ASSERT_EQ(b.status, 200) << b.body;
  EXPECT_EQ(a.parsed()["choices"][0]["text"], b.parsed()["choices"][0]["text"]);
  Reply c =
      post(port(), "/v1/completions", json{{"prompt", json::array({ids})}, {"max_tokens", 4}, {"temperature", 0}}.dump());
  ASSERT_EQ(c.status, 200) << c.body;
  EXPECT_EQ(a.parsed()["choices"][0]["text"], c.parsed()["choices"][0]["text"]);
}

// Each hostile or invalid request gets its documented answer, and the server stays healthy.
TEST_F(ServerHttp, DocumentedAnswersToBadRequests) {
  struct Case {
    std::string name, path, body;
    int status;
    std::string code;  // error.code expected ("" for a 200)
  };
  const std::string long_ids = [] {
    json ids = json::array();
    for (int i = 0; i < 600; ++i) ids.push_back(300);
    return json{{"prompt", ids}}.dump();
  }();
  const std::string deep = std::string(100, '[') + std::string(100, ']');
  const std::vector<Case> cases = {
      {"max_tokens 0", "/v1/completions", R"({"prompt": "a", "max_tokens": 0})", 400, "invalid_value"},
      {"max_tokens -1", "/v1/completions", R"({"prompt": "a", "max_tokens": -1})", 400, "invalid_value"},
      {"max_tokens 1e9", "/v1/completions", R"({"prompt": "a", "max_tokens": 1000000000})", 400, "invalid_value"},
      {"max_tokens string", "/v1/completions", R"({"prompt": "a", "max_tokens": "5"})", 400, "invalid_type"},
      {"max_tokens 2.5", "/v1/completions", R"({"prompt": "a", "max_tokens": 2.5})", 400, "invalid_value"},
      {"empty prompt", "/v1/completions", R"({"prompt": ""})", 400, "empty_prompt"},
      {"empty id list", "/v1/completions", R"({"prompt": []})", 400, "empty_prompt"},
      {"missing prompt", "/v1/completions", R"({"max_tokens": 3})", 400, "missing_required_parameter"},
      {"prompt 5", "/v1/completions", R"({"prompt": 5})", 400, "invalid_type"},
      {"prompt object", "/v1/completions", R"({"prompt": {"a": 1}})", 400, "invalid_type"},
      {"two prompts", "/v1/completions", R"({"prompt": ["a", "b"]})", 400, "invalid_value"},
      {"truncated JSON", "/v1/completions", R"({"prompt": "abc", "max_tok)", 400, "invalid_json"},
      {"not an object", "/v1/completions", R"([1, 2, 3])", 400, "invalid_json"},
      {"empty body", "/v1/completions", "", 400, "invalid_json"},
      {"invalid UTF-8", "/v1/completions", "{\"prompt\": \"a\xff\xfe b\"}", 400, "invalid_encoding"},
      {"overlong UTF-8", "/v1/completions", "{\"prompt\": \"\xc0\xaf\"}", 400, "invalid_encoding"},
      {"lone surrogate", "/v1/completions", R"({"prompt": "\ud800"})", 400, "invalid_json"},
      {"lone low surrogate", "/v1/completions", R"({"prompt": "x\udc00y"})", 400, "invalid_json"},
      {"deep nesting", "/v1/completions", deep, 400, "invalid_json"},
      {"logit_bias 999999", "/v1/completions", R"({"prompt": "a", "logit_bias": {"999999": 5}})", 400, "invalid_token"},
      {"logit_bias -1", "/v1/completions", R"({"prompt": "a", "logit_bias": {"-1": 5}})", 400, "invalid_token"},
      {"logit_bias word", "/v1/completions", R"({"prompt": "a", "logit_bias": {"abc": 5}})", 400, "invalid_token"},
      {"logit_bias 1000", "/v1/completions", R"({"prompt": "a", "logit_bias": {"5": 1000}})", 400, "invalid_value"},
      {"logit_bias twice", "/v1/completions", R"({"prompt": "a", "logit_bias": {"5": 1, "05": 1}})", 400,
       "invalid_token"},
      {"logit_bias array", "/v1/completions", R"({"prompt": "a", "logit_bias": [5, 1]})", 400, "invalid_type"},
      {"17 stop strings", "/v1/completions",
       R"({"prompt": "a", "stop": ["a","b","c","d","e","f","g","h","i","j","k","l","m","n","o","p","q"]})", 400,
       "invalid_value"},
      {"stop of 1025 bytes", "/v1/completions", json{{"prompt", "a"}, {"stop", std::string(1025, 's')}}.dump(), 400,
       "invalid_value"},
      {"token id outside vocab", "/v1/completions", R"({"prompt": [1, 99999]})", 400, "invalid_token"},
      {"negative token id", "/v1/completions", R"({"prompt": [1, -3]})", 400, "invalid_token"},
      {"n 0", "/v1/completions", R"({"prompt": "a", "n": 0})", 400, "invalid_value"},
      {"n above --max-n", "/v1/completions", R"({"prompt": "a", "n": 9})", 400, "invalid_value"},
      {"temperature -1", "/v1/completions", R"({"prompt": "a", "temperature": -1})", 400, "invalid_value"},
      {"top_p 2", "/v1/completions", R"({"prompt": "a", "top_p": 2})", 400, "invalid_value"},
      {"top_k -1", "/v1/completions", R"({"prompt": "a", "top_k": -1})", 400, "invalid_value"},
      {"stream string", "/v1/completions", R"({"prompt": "a", "stream": "yes"})", 400, "invalid_type"},
      {"stop number", "/v1/completions", R"({"prompt": "a", "stop": 5})", 400, "invalid_type"},
      {"echo", "/v1/completions", R"({"prompt": "a", "echo": true})", 400, "unsupported_parameter"},
      {"priority above range", "/v1/completions", R"({"prompt": "a", "priority": 1000001})", 400, "invalid_value"},
      {"deadline_ms -1", "/v1/completions", R"({"prompt": "a", "deadline_ms": -1})", 400, "invalid_value"},
      {"deadline_ms string", "/v1/completions", R"({"prompt": "a", "deadline_ms": "300"})", 400, "invalid_type"},
      {"deadline_policy unknown", "/v1/completions", R"({"prompt": "a", "deadline_policy": "sometimes"})", 400,
       "invalid_value"},
      {"deadline_policy number", "/v1/completions", R"({"prompt": "a", "deadline_policy": 1})", 400, "invalid_type"},
      {"deadline_policy best_effort", "/v1/completions",
       R"({"prompt": "a", "max_tokens": 2, "deadline_ms": 60000, "deadline_policy": "best_effort"})", 200, ""},
      {"prompt longer than context", "/v1/completions", long_ids, 400, "context_length_exceeded"},
      {"prompt + max_tokens over context", "/v1/completions", R"({"prompt": "a", "max_tokens": 600})", 400,
       "context_length_exceeded"},
      {"messages string", "/v1/chat/completions", R"({"messages": "hi"})", 400, "invalid_type"},
      {"messages empty", "/v1/chat/completions", R"({"messages": []})", 400, "empty_prompt"},
      {"message without role", "/v1/chat/completions", R"({"messages": [{"content": "hi"}]})", 400, "invalid_type"},
      {"image part", "/v1/chat/completions",
       R"({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]})", 400,
       "invalid_value"},
      {"top_logprobs without logprobs", "/v1/chat/completions",
       R"({"messages": [{"role": "user", "content": "hi"}], "top_logprobs": 2})", 400, "invalid_value"},
      {"top_k 0 (disabled)", "/v1/completions", R"({"prompt": "a", "top_k": 0, "max_tokens": 3})", 200, ""},
      {"unknown fields ignored", "/v1/completions",
       R"({"prompt": "a", "max_tokens": 2, "frobnicate": [1, {"x": null}], "user": "u1"})", 200, ""},
      {"nulls mean absent", "/v1/completions",
       R"({"prompt": "a", "max_tokens": 2, "temperature": null, "stop": null, "seed": null})", 200, ""},
      {"text parts", "/v1/chat/completions",
       R"({"messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}], "max_tokens": 2})", 200, ""},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    Reply r = post(port(), c.path, c.body);
    EXPECT_EQ(r.status, c.status) << r.body;
    json j = r.parsed();
    ASSERT_FALSE(j.is_discarded()) << "response is not JSON: " << r.body;
    if (c.status != 200) {
      ASSERT_TRUE(j.contains("error")) << r.body;
      EXPECT_TRUE(j["error"]["message"].is_string());
      EXPECT_EQ(j["error"]["type"], "invalid_request_error");
      EXPECT_EQ(j["error"]["code"], c.code);
    }
    expect_healthy();
  }
}

TEST_F(ServerHttp, ContextErrorsNameTheTokenCounts) {
  Reply r = post(port(), "/v1/completions", R"({"prompt": "a", "max_tokens": 600})");
  ASSERT_EQ(r.status, 400);
  const std::string msg = r.parsed()["error"]["message"];
  EXPECT_NE(msg.find("512"), std::string::npos) << msg;  // the context
  EXPECT_NE(msg.find("600"), std::string::npos) << msg;  // the asked tokens
}

TEST_F(ServerHttp, NSamplesAboveNParallelComplete) {
  std::map<std::string, double> before = metrics(port());
  for (bool stream : {false, true}) {
    json body = {{"prompt", "hello"}, {"n", 5}, {"max_tokens", 6}, {"temperature", 0.9}, {"seed", 7}};
    if (!stream) {
      Reply r = post(port(), "/v1/completions", body.dump());
      ASSERT_EQ(r.status, 200) << r.body;
      json j = r.parsed();
      ASSERT_EQ(j["choices"].size(), 5u);
      for (int i = 0; i < 5; ++i) EXPECT_EQ(j["choices"][i]["index"], i);
      EXPECT_LE(j["usage"]["completion_tokens"].get<int>(), 30);
      // Every sample's tokens are counted once in the generated-tokens counter.
      std::map<std::string, double> m = wait_metrics(port(), [&](std::map<std::string, double>& mm) {
        return mm["ubatch_requests_running"] == 0;
      });
      EXPECT_EQ(m["ubatch_generated_tokens_total"] - before["ubatch_generated_tokens_total"],
                j["usage"]["completion_tokens"].get<double>());
    } else {
      body["stream"] = true;
      StreamResult s = post_stream(port(), "/v1/completions", body);
      ASSERT_EQ(s.status, 200);
      EXPECT_TRUE(s.done);
      EXPECT_EQ(s.finish.size(), 5u);
    }
  }
}

TEST_F(ServerHttp, LogprobsShapes) {
  Reply r = post(port(), "/v1/completions", R"({"prompt": "hello", "max_tokens": 4, "temperature": 0, "logprobs": 3, "ignore_eos": true})");
  ASSERT_EQ(r.status, 200) << r.body;
  json lp = r.parsed()["choices"][0]["logprobs"];
  ASSERT_TRUE(lp.is_object()) << r.body;
  EXPECT_EQ(lp["tokens"].size(), 4u);
  EXPECT_EQ(lp["token_logprobs"].size(), 4u);
  EXPECT_EQ(lp["text_offset"].size(), 4u);
  ASSERT_EQ(lp["top_logprobs"].size(), 4u);
  EXPECT_EQ(lp["top_logprobs"][0].size(), 3u);
  for (const json& v : lp["token_logprobs"]) EXPECT_LE(v.get<double>(), 0.0);

  Reply c = post(port(), "/v1/chat/completions",
                 R"({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 3, "temperature": 0,
                     "logprobs": true, "top_logprobs": 2, "ignore_eos": true})");
  ASSERT_EQ(c.status, 200) << c.body;
  json content = c.parsed()["choices"][0]["logprobs"]["content"];
  ASSERT_EQ(content.size(), 3u) << c.body;
  EXPECT_TRUE(content[0]["token"].is_string());
  EXPECT_TRUE(content[0]["bytes"].is_array());
  EXPECT_EQ(content[0]["top_logprobs"].size(), 2u);
}

TEST_F(ServerHttp, SeedMakesSamplingRepeatable) {
  const std::string body = R"({"prompt": "hello", "max_tokens": 12, "temperature": 1.0, "seed": 1234, "ignore_eos": true})";
  Reply a = post(port(), "/v1/completions", body);
  Reply b = post(port(), "/v1/completions", body);
  ASSERT_EQ(a.status, 200);
  ASSERT_EQ(b.status, 200);
  EXPECT_EQ(a.parsed()["choices"][0]["text"], b.parsed()["choices"][0]["text"]);
}

TEST_F(ServerHttp, TokenizeDetokenize) {
  Reply t = post(port(), "/tokenize", R"({"content": "hello world"})");
  ASSERT_EQ(t.status, 200) << t.body;
  json ids = t.parsed()["tokens"];
  ASSERT_FALSE(ids.empty());
  Reply with_bos = post(port(), "/tokenize", R"({"content": "hello world", "add_special": true})");
  EXPECT_EQ(with_bos.parsed()["tokens"].size(), ids.size() + 1);
  EXPECT_EQ(with_bos.parsed()["tokens"][0], served_->tokenizer->bos());
  Reply d = post(port(), "/detokenize", json{{"tokens", ids}}.dump());
  ASSERT_EQ(d.status, 200) << d.body;
  EXPECT_EQ(d.parsed()["content"], "hello world");
  Reply pieces = post(port(), "/tokenize", R"({"content": "hello", "with_pieces": true})");
  ASSERT_EQ(pieces.status, 200);
  EXPECT_TRUE(pieces.parsed()["tokens"][0].contains("piece"));

  EXPECT_EQ(post(port(), "/tokenize", R"({"content": 5})").status, 400);
  EXPECT_EQ(post(port(), "/tokenize", R"({})").status, 400);
  EXPECT_EQ(post(port(), "/detokenize", R"({"tokens": [1, 100000]})").status, 400);
  EXPECT_EQ(post(port(), "/detokenize", R"({"tokens": [-1]})").status, 400);
  EXPECT_EQ(post(port(), "/detokenize", R"({"tokens": "1 2"})").status, 400);
  // A lone byte token detokenizes to valid UTF-8 (U+FFFD), never to a broken JSON string.
  Reply byte = post(port(), "/detokenize", R"({"tokens": [200]})");
  ASSERT_EQ(byte.status, 200);
  EXPECT_FALSE(byte.parsed().is_discarded());
}

TEST_F(ServerHttp, ModelsHealthAndUnknownRoutes) {
  Reply m = get(port(), "/v1/models");
  ASSERT_EQ(m.status, 200);
  json j = m.parsed();
  EXPECT_EQ(j["object"], "list");
  ASSERT_EQ(j["data"].size(), 1u);
  EXPECT_EQ(j["data"][0]["id"], "test-model");
  EXPECT_EQ(j["data"][0]["meta"]["n_ctx"], 512);
  Reply h = get(port(), "/health");
  EXPECT_EQ(h.status, 200);
  EXPECT_EQ(h.parsed()["status"], "ok");
  // Paths are matched byte for byte, never decoded nor normalised: traversal is just unknown.
  for (const char* path : {"/nope", "/etc/passwd", "/../../etc/passwd", "/v1/completions/../models",
                           "/%2e%2e/%2e%2e/etc/passwd", "/v1/%2E%2E/v1/models", "/webui/%2e%2e/index.html",
                           "/v1//models", "/v1/models/"}) {
    Reply r = get(port(), path);
    EXPECT_EQ(r.status, 404) << path;
    EXPECT_EQ(r.parsed()["error"]["type"], "not_found_error") << r.body;
  }
  EXPECT_EQ(get(port(), "/v1/completions").status, 404);  // GET on a POST route
}

TEST_F(ServerHttp, BodyOverMaxBodyIs413) {
  const std::string big = json{{"prompt", std::string(100 * 1024, 'a')}}.dump();
  Reply r = post(port(), "/v1/completions", big);
  EXPECT_EQ(r.status, 413);
  json j = r.parsed();
  ASSERT_FALSE(j.is_discarded()) << r.body;
  EXPECT_EQ(j["error"]["code"], "request_too_large");
  expect_healthy();
}

TEST_F(ServerHttp, AFormEncodedJsonBodyIsReadLikeAnyOther) {
  // curl -d without -H sends application/x-www-form-urlencoded: the body is still JSON and
  // the server reads it whatever the Content-Type says, within --max-body.
  const std::string body = json{{"content", std::string(9000, 'a')}}.dump();
  Reply r = request(port(), "POST", "/tokenize", body, {}, "application/x-www-form-urlencoded");
  EXPECT_EQ(r.status, 200) << r.body;
  EXPECT_FALSE(r.parsed()["tokens"].empty());
  expect_healthy();
}

TEST_F(ServerHttp, MetricsParseAndCountExactlyTheTokensServed) {
  std::map<std::string, double> before = metrics(port());
  for (const char* name : {"ubatch_generated_tokens_total", "ubatch_prompt_tokens_total",
                           "ubatch_cached_prompt_tokens_total", "ubatch_requests_finished_total",
                           "ubatch_kv_blocks_used", "ubatch_requests_running", "ubatch_requests_queued",
                           "ubatch_ttft_seconds_count", "ubatch_tpot_seconds_count", "ubatch_queue_time_seconds_count",
                           "ubatch_ttft_seconds_bucket{le=\"+Inf\"}", "ubatch_kv_usage_ratio",
                           "ubatch_preemptions_total{cause=\"memory\"}", "ubatch_preemptions_total{cause=\"priority\"}",
                           "ubatch_deadline_misses_total{stage=\"queued\"}",
                           "ubatch_deadline_misses_total{stage=\"running\"}",
                           "ubatch_requests_rejected_total{cause=\"queue_full\"}",
                           "ubatch_requests_rejected_total{cause=\"too_long\"}",
                           "ubatch_requests_rejected_total{cause=\"invalid\"}",
                           "ubatch_requests_rejected_total{cause=\"deadline\"}"})
    EXPECT_TRUE(before.count(name)) << name;
  int64_t prompt_sum = 0, completion_sum = 0, cached_sum = 0;
  auto add_usage = [&](const json& u) {
    prompt_sum += u["prompt_tokens"].get<int64_t>();
    completion_sum += u["completion_tokens"].get<int64_t>();
    cached_sum += u["prompt_tokens_details"]["cached_tokens"].get<int64_t>();
  };
  const std::vector<std::string> prompts = {"alpha beta gamma", "the quick brown fox", "1 2 3 4 5 6 7 8 9"};
  for (size_t i = 0; i < prompts.size(); ++i) {
    json body = {{"prompt", prompts[i]}, {"max_tokens", 5 + 3 * static_cast<int>(i)}, {"temperature", 0}};
    Reply r = post(port(), "/v1/completions", body.dump());
    ASSERT_EQ(r.status, 200);
    add_usage(r.parsed()["usage"]);
    body["stream"] = true;
    body["stream_options"] = {{"include_usage", true}};
    StreamResult s = post_stream(port(), "/v1/completions", body);
    ASSERT_EQ(s.status, 200);
    ASSERT_TRUE(s.usage.is_object());
    add_usage(s.usage);
  }
  // The engine may publish its gauges a step after the last Done event: wait for it to settle.
  std::map<std::string, double> after = wait_metrics(port(), [&](std::map<std::string, double>& m) {
    return m["ubatch_requests_finished_total"] - before["ubatch_requests_finished_total"] >= 6 &&
           m["ubatch_requests_running"] == 0 && m["ubatch_kv_blocks_used"] == 0;
  });
  EXPECT_EQ(after["ubatch_generated_tokens_total"] - before["ubatch_generated_tokens_total"], completion_sum);
  EXPECT_EQ(after["ubatch_prompt_tokens_total"] + after["ubatch_cached_prompt_tokens_total"] -
                before["ubatch_prompt_tokens_total"] - before["ubatch_cached_prompt_tokens_total"],
            prompt_sum);
  EXPECT_EQ(after["ubatch_cached_prompt_tokens_total"] - before["ubatch_cached_prompt_tokens_total"], cached_sum);
  EXPECT_EQ(after["ubatch_requests_finished_total"] - before["ubatch_requests_finished_total"], 6);
  EXPECT_EQ(after["ubatch_ttft_seconds_count"] - before["ubatch_ttft_seconds_count"], 6);
  EXPECT_GE(after["ubatch_http_responses_total{code=\"200\"}"], before["ubatch_http_responses_total{code=\"200\"}"] + 6);
  // Histograms: cumulative buckets never decrease and +Inf equals the count.
  for (const char* h : {"ubatch_ttft_seconds", "ubatch_tpot_seconds", "ubatch_queue_time_seconds", "ubatch_e2e_seconds"}) {
    std::vector<std::pair<double, double>> buckets;  // (le, cumulative count)
    const std::string prefix = std::string(h) + "_bucket{le=\"";
    for (const auto& [key, v] : after)
      if (key.rfind(prefix, 0) == 0) buckets.emplace_back(std::strtod(key.c_str() + prefix.size(), nullptr), v);
    std::sort(buckets.begin(), buckets.end());
    ASSERT_EQ(buckets.size(), sched::Histogram::kBoundsMs.size() + 1) << h;
    for (size_t i = 1; i < buckets.size(); ++i) EXPECT_GE(buckets[i].second, buckets[i - 1].second) << h;
    EXPECT_EQ(after[std::string(h) + "_bucket{le=\"+Inf\"}"], after[std::string(h) + "_count"]) << h;
    EXPECT_GE(after[std::string(h) + "_sum"], 0.0);
  }
  EXPECT_EQ(after["ubatch_requests_running"], 0);
  EXPECT_EQ(after["ubatch_kv_blocks_used"], 0);
}

// Seeded mutations of valid bodies (bytes flipped, cut, duplicated, spliced): every answer
// is a JSON body with 200 or 400, and the server stays healthy.
TEST_F(ServerHttp, MutatedBodiesNeverBreakTheServer) {
  const std::vector<std::string> seeds = {
      R"({"prompt": "hello", "max_tokens": 2, "temperature": 0.5, "stop": ["a", "b"], "logit_bias": {"5": 1}})",
      R"({"messages": [{"role": "user", "content": "hi \u00e9 \ud83d\ude00"}], "max_tokens": 2, "n": 2})",
      R"({"prompt": [1, 2, 3], "max_tokens": 2, "logprobs": 2, "stream": true, "stream_options": {"include_usage": true}})",
  };
  const std::string kPunct = "{}[]\":,0-9e.\\";  // JSON punctuation to splice in
  std::mt19937 rng(12345);
  int n_ok = 0, n_bad = 0;
  for (int i = 0; i < 300; ++i) {
    const size_t which = rng() % seeds.size();
    std::string body = seeds[which];
    const int n_mut = 1 + static_cast<int>(rng() % 4);
    for (int m = 0; m < n_mut && !body.empty(); ++m) {
      const size_t at = rng() % body.size();
      switch (rng() % 5) {
        case 0: body[at] = static_cast<char>(rng() & 0xFF); break;          // any byte
        case 1: body.resize(at); break;                                     // truncate
        case 2: body = body.substr(0, at) + body.substr(at, rng() % 16) + body.substr(at); break;  // duplicate a run
        case 3: body.erase(at, 1 + rng() % 8); break;                       // delete a run
        case 4: body = body.substr(0, at) + kPunct[rng() % kPunct.size()] + body.substr(at); break;
      }
    }
    const std::string path = which == 1 ? "/v1/chat/completions" : "/v1/completions";
    Reply r = post(port(), path, body);
    ASSERT_TRUE(r.status == 200 || r.status == 400) << "status " << r.status << " for body: " << body;
    if (r.status == 200) {
      ++n_ok;
      if (r.body.rfind("data: ", 0) != 0) {
        EXPECT_FALSE(r.parsed().is_discarded()) << r.body;
      }
    } else {
      ++n_bad;
      EXPECT_TRUE(r.parsed().contains("error")) << r.body;
    }
  }
  EXPECT_GT(n_bad, 0);
  expect_healthy();
}

// Broken HTTP (not JSON problems): the connection fails or gets a 4xx, the server lives on.
TEST_F(ServerHttp, MalformedHttpNeverBreaksTheServer) {
  const std::vector<std::string> raw = {
      "GARBAGE\r\n\r\n",
      "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{\"prompt\": \"a\"}",  // short body
      "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: -5\r\n\r\n",
      "POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nZZZ\r\nabc\r\n0\r\n\r\n",
      "POST /v1/completions HTTP/1.1\r\nHost: x\r\nNoColonHeader\r\n\r\n",
      "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 99999999999999999999\r\n\r\n",
      std::string("GET /health HTTP/1.1\r\nX-Big: ") + std::string(20000, 'x') + "\r\n\r\n",
  };
  for (const std::string& req : raw) {
    RawConnection conn(port());
    ASSERT_TRUE(conn.ok());
    ::send(conn.fd(), req.data(), req.size(), MSG_NOSIGNAL);
    ::shutdown(conn.fd(), SHUT_WR);  // no more bytes: the server must not wait forever
    const std::string reply = conn.read_until("\r\n\r\n", 1);
    if (!reply.empty()) {
      EXPECT_NE(reply.find("HTTP/1.1 4"), std::string::npos) << reply.substr(0, 200);
    }
    expect_healthy();
  }
}

// The server's own pieces without a model: UTF-8 validation and the histogram rendering.
TEST(ServerUnits, Utf8Validation) {
  using server::is_valid_utf8;
  EXPECT_TRUE(is_valid_utf8(""));
  EXPECT_TRUE(is_valid_utf8("plain ascii"));
  EXPECT_TRUE(is_valid_utf8("caf\xc3\xa9 \xe4\xbd\xa0\xe5\xa5\xbd \xf0\x9f\x98\x80"));
  size_t at = 0;
  EXPECT_FALSE(is_valid_utf8("ab\xff", &at));
  EXPECT_EQ(at, 2u);
  EXPECT_FALSE(is_valid_utf8("\xc0\xaf"));          // overlong
  EXPECT_FALSE(is_valid_utf8("\xed\xa0\x80"));      // surrogate U+D800
  EXPECT_FALSE(is_valid_utf8("\xf4\x90\x80\x80"));  // above U+10FFFF
  EXPECT_FALSE(is_valid_utf8("\xe4\xbd"));          // truncated
}

TEST(ServerUnits, JsonBodyErrors) {
  json out;
  EXPECT_TRUE(server::parse_json_body(R"({"a": "\ud800"})", out).has_value());
  EXPECT_TRUE(server::parse_json_body(R"({"a": "\ud83d\ude00"})", out) == std::nullopt);  // a valid pair
  EXPECT_EQ(out["a"], "\xf0\x9f\x98\x80");
  EXPECT_TRUE(server::parse_json_body(std::string(65, '[') + std::string(65, ']'), out).has_value());
  EXPECT_TRUE(server::parse_json_body(R"({"a": "[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[["})", out) ==
              std::nullopt);  // brackets inside strings do not count
}

TEST(ServerUnits, HistogramIsCumulativeInSeconds) {
  sched::Histogram h;
  h.buckets[0] = 2;  // <= 1 ms
  h.buckets[3] = 1;  // <= 10 ms
  h.count = 4;       // one above the last bound
  h.sum_ms = 400000;
  const std::string text = server::render_histogram("ubatch_x_seconds", "x", {{"", &h}});
  std::map<std::string, double> m = parse_prometheus(text);
  EXPECT_EQ(m["ubatch_x_seconds_bucket{le=\"0.001\"}"], 2);
  EXPECT_EQ(m["ubatch_x_seconds_bucket{le=\"0.005\"}"], 2);
  EXPECT_EQ(m["ubatch_x_seconds_bucket{le=\"0.01\"}"], 3);
  EXPECT_EQ(m["ubatch_x_seconds_bucket{le=\"300\"}"], 3);
  EXPECT_EQ(m["ubatch_x_seconds_bucket{le=\"+Inf\"}"], 4);
  EXPECT_EQ(m["ubatch_x_seconds_count"], 4);
  EXPECT_DOUBLE_EQ(m["ubatch_x_seconds_sum"], 400.0);
}

// A server that is still loading answers 503 (health, completions), then 200 once the backend is attached.
TEST(ServerLifecycle, LoadingThenReady) {
  UBATCH_REQUIRE_TINY_MODEL();
  ServeOptions o;
  o.attach_backend = false;
  o.engine.n_batch = 64;
  o.n_ctx = 256;
  std::unique_ptr<ServedModel> s = serve_model(tiny_model(), o);
  ASSERT_NE(s, nullptr);
  Reply h = get(s->port, "/health");
  EXPECT_EQ(h.status, 503);
  EXPECT_EQ(h.parsed()["status"], "loading");
  EXPECT_FALSE(h.headers.find("Retry-After") == h.headers.end());
  Reply c = post(s->port, "/v1/completions", R"({"prompt": "a"})");
  EXPECT_EQ(c.status, 503);
  EXPECT_EQ(c.parsed()["error"]["type"], "unavailable_error");
  Reply m = get(s->port, "/metrics");
  EXPECT_EQ(m.status, 200);
  EXPECT_EQ(parse_prometheus(m.body)["ubatch_ready"], 0);
  s->http->set_backend(*s->engine, *s->tokenizer);
  EXPECT_EQ(get(s->port, "/health").status, 200);
  EXPECT_EQ(post(s->port, "/v1/completions", R"({"prompt": "a", "max_tokens": 2})").status, 200);
}

TEST(ServerLifecycle, ApiKey) {
  UBATCH_REQUIRE_TINY_MODEL();
  ServeOptions o;
  o.server.api_key = "sekrit-key";
  o.engine.n_batch = 64;
  o.n_ctx = 256;
  std::unique_ptr<ServedModel> s = serve_model(tiny_model(), o);
  ASSERT_NE(s, nullptr);
  const std::string body = R"({"prompt": "a", "max_tokens": 2})";
  Reply none = post(s->port, "/v1/completions", body);
  EXPECT_EQ(none.status, 401);
  EXPECT_EQ(none.parsed()["error"]["type"], "authentication_error");
  EXPECT_EQ(post(s->port, "/v1/completions", body, {{"Authorization", "Bearer wrong"}}).status, 401);
  EXPECT_EQ(post(s->port, "/v1/completions", body, {{"Authorization", "Bearer sekrit-ke"}}).status, 401);
  EXPECT_EQ(post(s->port, "/v1/completions", body, {{"Authorization", "sekrit-key"}}).status, 401);
  EXPECT_EQ(post(s->port, "/v1/completions", body, {{"Authorization", "Bearer sekrit-key"}}).status, 200);
  EXPECT_EQ(get(s->port, "/v1/models").status, 401);
  EXPECT_EQ(get(s->port, "/metrics").status, 401);
  EXPECT_EQ(get(s->port, "/metrics", {{"Authorization", "Bearer sekrit-key"}}).status, 200);
  EXPECT_EQ(get(s->port, "/health").status, 200);  // probes need no key
  EXPECT_EQ(get(s->port, "/v1/health").status, 200);
  // Every other route needs it (the web page's files excepted: the page asks for the key), and a
  // refused request is never parsed.
  for (const auto& [method, path] : std::vector<std::pair<std::string, std::string>>{
           {"POST", "/v1/chat/completions"}, {"POST", "/chat/completions"}, {"POST", "/completions"},
           {"POST", "/v1/embeddings"}, {"POST", "/embeddings"}, {"POST", "/tokenize"}, {"POST", "/detokenize"},
           {"POST", "/apply-template"}, {"POST", "/v1/apply-template"}, {"GET", "/models"},
           {"GET", "/v1/dashboard/events"}, {"GET", "/openapi.json"}, {"GET", "/no-such-route"}}) {
    const Reply r = request(s->port, method, path, method == "POST" ? body : "");
    EXPECT_EQ(r.status, 401) << method << " " << path << ": " << r.body;
  }
}

// With room for one running and one waiting request, a burst gets 503 + Retry-After for the rest.
TEST(ServerLifecycle, QueueFullIs503WithRetryAfter) {
  UBATCH_REQUIRE_TINY_MODEL();
  ServeOptions o;
  o.engine.n_parallel = 1;
  o.engine.max_queue = 1;
  o.engine.n_batch = 64;
  o.n_ctx = 2048;
  std::unique_ptr<ServedModel> s = serve_model(tiny_model(), o);
  ASSERT_NE(s, nullptr);
  const std::string body = R"({"prompt": "a", "max_tokens": 400, "ignore_eos": true, "temperature": 0})";
  std::vector<std::future<Reply>> replies;
  for (int i = 0; i < 6; ++i)
    replies.push_back(std::async(std::launch::async, [&] { return post(s->port, "/v1/completions", body); }));
  int ok = 0, full = 0;
  for (auto& f : replies) {
    Reply r = f.get();
    if (r.status == 200) {
      ++ok;
    } else {
      EXPECT_EQ(r.status, 503) << r.body;
      EXPECT_EQ(r.parsed()["error"]["code"], "queue_full");
      EXPECT_FALSE(r.headers.find("Retry-After") == r.headers.end());
      ++full;
    }
  }
  EXPECT_GE(ok, 1);
  EXPECT_GE(full, 1);
  EXPECT_EQ(get(s->port, "/health").status, 200);
}

// stop() with a stream in flight cancels it and returns; the client sees its stream end.
TEST(ServerLifecycle, StopWithAStreamInFlight) {
  UBATCH_REQUIRE_TINY_MODEL();
  ServeOptions o;
  o.engine.n_batch = 64;
  o.n_ctx = 2048;
  std::unique_ptr<ServedModel> s = serve_model(tiny_model(), o);
  ASSERT_NE(s, nullptr);
  RawConnection conn(s->port);
  ASSERT_TRUE(conn.ok());
  ASSERT_TRUE(conn.send_post("/v1/completions",
                             R"({"prompt": "a", "max_tokens": 2000, "ignore_eos": true, "stream": true})"));
  ASSERT_NE(conn.read_until("\n\n", 2).find("200 OK"), std::string::npos);
  s->http->stop();
  conn.read_until("never-sent", 1);  // returns once the server closed the connection
  EXPECT_LT(s->engine->metrics().generated_tokens, 2000u);
  s.reset();  // engine after server: no handler touches it any more
}

}  // namespace
}  // namespace ubatch::test
