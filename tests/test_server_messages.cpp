// POST /v1/messages and /v1/messages/count_tokens (issue 33, item 3; docs/API.md, "Three wire
// formats") through the real server on the embedded chat model, SmolLM2-135M-Instruct: the
// message object and stop reasons (max_tokens, stop_sequence, tool_use), count_tokens equal to
// usage.input_tokens, the streamed event sequence, a tool round trip (tool_use, then
// tool_result), thinking blocks within budget_tokens with a thinking template
// (tests/data/think_chatml.jinja), the 400s in Anthropic's error shape, and x-api-key.
#include "test_server_fixture.h"

#include <fstream>

namespace ubatch::test {
namespace {

std::string messages_file_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

const json kMessagesWeather = {{"name", "get_weather"},
                               {"description", "Get the current weather for a city."},
                               {"input_schema",
                                {{"type", "object"},
                                 {"properties", {{"city", {{"type", "string"}, {"maxLength", 20}}}}},
                                 {"required", {"city"}},
                                 {"additionalProperties", false}}}};

class ServerMessages : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!std::filesystem::exists(::ubatch::test::smollm2_model())) return;
    ServeOptions o;
    o.engine.n_parallel = 2;
    o.n_threads = 2;
    o.server.api_key = "test-key";
    served_ = serve_model(::ubatch::test::smollm2_model(), o).release();
  }
  static void TearDownTestSuite() {
    delete served_;
    served_ = nullptr;
  }
  void SetUp() override {
    if (!std::filesystem::exists(::ubatch::test::smollm2_model()))
      GTEST_SKIP() << "no SmolLM2-135M-Instruct GGUF at " << ::ubatch::test::smollm2_model() << " (scripts/setup.sh)";
    ASSERT_TRUE(served_);
  }
  static Reply send(const std::string& path, const json& body) {
    return post(served_->port, path, body.dump(), {{"x-api-key", "test-key"}, {"anthropic-version", "2023-06-01"}});
  }
  static ServedModel* served_;
};
ServedModel* ServerMessages::served_ = nullptr;

json messages_ask(int max_tokens = 8) {
  return {{"model", "any"},
          {"max_tokens", max_tokens},
          {"temperature", 0},
          {"messages", json::array({{{"role", "user"}, {"content", "Why is the sky blue?"}}})}};
}

std::string messages_text(const json& m) {
  std::string text;
  for (const json& b : m["content"])
    if (b["type"] == "text") text += b["text"].get<std::string>();
  return text;
}

void expect_anthropic_error(const Reply& r, int status, const std::string& type, const std::string& words) {
  EXPECT_EQ(r.status, status) << r.body;
  const json e = r.parsed();
  EXPECT_EQ(e["type"], "error") << r.body;
  EXPECT_EQ(e["error"]["type"], type) << r.body;
  EXPECT_NE(e["error"]["message"].get<std::string>().find(words), std::string::npos) << r.body;
}

TEST_F(ServerMessages, MessageStopReasonsAndCountTokens) {
  json body = messages_ask();
  body["system"] = json::array({{{"type", "text"}, {"text", "You are terse."}}});
  body["metadata"] = {{"user_id", "u1"}};
  Reply r = send("/v1/messages", body);
  ASSERT_EQ(r.status, 200) << r.body;
  const json m = r.parsed();
  EXPECT_EQ(m["type"], "message");
  EXPECT_EQ(m["role"], "assistant");
  EXPECT_EQ(m["id"].get<std::string>().rfind("msg_", 0), 0u);
  EXPECT_EQ(m["stop_reason"], "max_tokens");
  EXPECT_TRUE(m["stop_sequence"].is_null());
  ASSERT_EQ(m["content"].size(), 1u);
  EXPECT_EQ(m["content"][0]["type"], "text");
  EXPECT_FALSE(messages_text(m).empty());
  EXPECT_EQ(m["usage"]["output_tokens"], 8);
  EXPECT_TRUE(m["usage"].contains("cache_read_input_tokens"));
  // count_tokens: the same body's usage.input_tokens (max_tokens is optional there).
  Reply c = send("/v1/messages/count_tokens", body);
  ASSERT_EQ(c.status, 200) << c.body;
  EXPECT_EQ(c.parsed(), json({{"input_tokens", m["usage"]["input_tokens"]}}));
  json with_tools = body;
  with_tools.erase("max_tokens");
  with_tools["tools"] = json::array({kMessagesWeather});
  Reply ct = send("/v1/messages/count_tokens", with_tools);
  ASSERT_EQ(ct.status, 200) << ct.body;
  with_tools["max_tokens"] = 1;
  EXPECT_EQ(ct.parsed()["input_tokens"], send("/v1/messages", with_tools).parsed()["usage"]["input_tokens"]);
  // A stop sequence the reply reaches ends it, and is named.
  const std::string text = messages_text(m);
  const std::string stop = text.substr(text.size() / 2, 3);
  json stopped = body;
  stopped["stop_sequences"] = json::array({"zzqq", stop});
  Reply s = send("/v1/messages", stopped);
  ASSERT_EQ(s.status, 200) << s.body;
  EXPECT_EQ(s.parsed()["stop_reason"], "stop_sequence") << s.body << " stop '" << stop << "'";
  EXPECT_EQ(s.parsed()["stop_sequence"], stop) << s.body;
  EXPECT_EQ(messages_text(s.parsed()), text.substr(0, text.find(stop))) << s.body;
}

TEST_F(ServerMessages, StreamedEventSequence) {
  const std::string whole = messages_text(send("/v1/messages", messages_ask(6)).parsed());
  json body = messages_ask(6);
  body["stream"] = true;
  Reply r = send("/v1/messages", body);
  ASSERT_EQ(r.status, 200) << r.body;
  std::vector<std::string> types;
  std::string text;
  const auto events = sse_named_events(r.body);
  for (const auto& [name, data] : events) {
    EXPECT_EQ(data["type"], name);
    if (name == "content_block_delta") {
      EXPECT_EQ(data["delta"]["type"], "text_delta");
      text += data["delta"]["text"].get<std::string>();
      if (types.back() == name) continue;
    }
    types.push_back(name);
  }
  const std::vector<std::string> want = {"message_start",       "ping",          "content_block_start",
                                         "content_block_delta", "content_block_stop", "message_delta",
                                         "message_stop"};
  EXPECT_EQ(types, want) << r.body;
  EXPECT_EQ(text, whole);
  ASSERT_GE(events.size(), 4u);
  EXPECT_GT(events[0].second["message"]["usage"]["input_tokens"].get<int>(), 5);
  const json& delta = events[events.size() - 2].second;
  EXPECT_EQ(delta["delta"]["stop_reason"], "max_tokens");
  EXPECT_EQ(delta["usage"]["output_tokens"], 6);
}

TEST_F(ServerMessages, ToolUseRoundTripStreamedAndNot) {
  json body = {{"max_tokens", 48},
               {"temperature", 0},
               {"tools", json::array({kMessagesWeather})},
               {"tool_choice", {{"type", "any"}, {"disable_parallel_tool_use", true}}},
               {"messages", json::array({{{"role", "user"}, {"content", "What is the weather in Paris?"}}})}};
  Reply r = send("/v1/messages", body);
  ASSERT_EQ(r.status, 200) << r.body;
  const json m = r.parsed();
  EXPECT_EQ(m["stop_reason"], "tool_use") << r.body;
  json use;
  for (const json& b : m["content"])
    if (b["type"] == "tool_use") use = b;
  ASSERT_TRUE(use.is_object()) << r.body;
  EXPECT_EQ(use["name"], "get_weather");
  EXPECT_TRUE(use["input"]["city"].is_string()) << use;
  // Streamed: a tool_use block whose input_json_delta pieces make the same input.
  body["stream"] = true;
  Reply s = send("/v1/messages", body);
  ASSERT_EQ(s.status, 200) << s.body;
  std::string partial;
  bool started = false;
  std::string stop_reason;
  for (const auto& [name, data] : sse_named_events(s.body)) {
    if (name == "content_block_start" && data["content_block"]["type"] == "tool_use") {
      started = true;
      EXPECT_EQ(data["content_block"]["name"], "get_weather");
    }
    if (name == "content_block_delta" && data["delta"]["type"] == "input_json_delta")
      partial += data["delta"]["partial_json"].get<std::string>();
    if (name == "message_delta") stop_reason = data["delta"]["stop_reason"];
  }
  EXPECT_TRUE(started) << s.body;
  EXPECT_EQ(json::parse(partial, nullptr, false), use["input"]) << partial;
  EXPECT_EQ(stop_reason, "tool_use");
  // The round trip: tool_use back in the assistant turn, tool_result in the next user turn.
  json next = {{"max_tokens", 8},
               {"temperature", 0},
               {"tools", json::array({kMessagesWeather})},
               {"messages", json::array({{{"role", "user"}, {"content", "What is the weather in Paris?"}},
                                         {{"role", "assistant"}, {"content", json::array({use})}},
                                         {{"role", "user"},
                                          {"content", json::array({{{"type", "tool_result"},
                                                                    {"tool_use_id", use["id"]},
                                                                    {"content", json::array({{{"type", "text"}, {"text", "22 C, sunny"}}})}}})}}})}};
  Reply r2 = send("/v1/messages", next);
  ASSERT_EQ(r2.status, 200) << r2.body;
  EXPECT_GT(r2.parsed()["usage"]["input_tokens"].get<int>(), m["usage"]["input_tokens"].get<int>());
  next["messages"][2]["content"][0]["is_error"] = true;
  EXPECT_EQ(send("/v1/messages", next).status, 200);
}

TEST_F(ServerMessages, BadInputIsA400InAnthropicShapeAndTheKey) {
  auto with = [](json patch) {
    json b = messages_ask(8);
    b.update(patch);
    return b;
  };
  const std::string invalid = "invalid_request_error";
  json no_max = messages_ask();
  no_max.erase("max_tokens");
  expect_anthropic_error(send("/v1/messages", no_max), 400, invalid, "'max_tokens' is required");
  expect_anthropic_error(
      send("/v1/messages",
           with({{"messages", json::array({{{"role", "user"},
                                            {"content", json::array({{{"type", "tool_result"}, {"tool_use_id", "toolu_1"}, {"content", "x"}}})}}})}})),
      400, invalid, "no earlier tool_use");
  expect_anthropic_error(
      send("/v1/messages",
           with({{"messages", json::array({{{"role", "user"},
                                            {"content", json::array({{{"type", "image"}, {"source", json::object()}}})}}})}})),
      400, invalid, "block type 'image' is not supported");
  expect_anthropic_error(send("/v1/messages", with({{"thinking", {{"type", "enabled"}, {"budget_tokens", 8}}}})), 400,
                         invalid, "below 'max_tokens'");
  expect_anthropic_error(send("/v1/messages", with({{"thinking", {{"type", "enabled"}, {"budget_tokens", -3}}}})), 400,
                         invalid, "at least 1");
  expect_anthropic_error(
      send("/v1/messages", with({{"thinking", {{"type", "enabled"}, {"budget_tokens", 1e15}}}})), 400, invalid, "integer");
  expect_anthropic_error(
      send("/v1/messages", with({{"thinking", {{"type", "enabled"}, {"budget_tokens", 99999999999LL}}}})), 400, invalid,
      "at least 1");
  expect_anthropic_error(send("/v1/messages", with({{"thinking", {{"type", "sometimes"}}}})), 400, invalid, "thinking");
  expect_anthropic_error(send("/v1/messages", with({{"messages", json::array({{{"role", "system"}, {"content", "x"}}})}})),
                         400, invalid, "role");
  expect_anthropic_error(send("/v1/messages", with({{"tools", json::array({{{"type", "web_search_20250305"}, {"name", "web_search"}}})}})),
                         400, invalid, "web_search_20250305");
  expect_anthropic_error(send("/v1/messages", with({{"tool_choice", {{"type", "tool"}, {"name", "nope"}}}})), 400, invalid,
                         "not among 'tools'");
  expect_anthropic_error(send("/v1/messages", with({{"messages", json::array()}})), 400, invalid, "empty");
  // Nothing in a request changes a server setting: chat_template_kwargs is not read here.
  EXPECT_EQ(send("/v1/messages", with({{"chat_template_kwargs", {{"bos_token", "x"}}}})).status, 200);
  // count_tokens answers errors in the same shape.
  expect_anthropic_error(send("/v1/messages/count_tokens", with({{"messages", 5}})), 400, invalid, "messages");
  // The key: x-api-key or a bearer token; without either a 401 in Anthropic's shape.
  expect_anthropic_error(post(served_->port, "/v1/messages", messages_ask().dump()), 401, "authentication_error",
                         "x-api-key");
  expect_anthropic_error(post(served_->port, "/v1/messages", messages_ask().dump(), {{"x-api-key", "wrong"}}), 401,
                         "authentication_error", "API key");
  EXPECT_EQ(post(served_->port, "/v1/messages", messages_ask(2).dump(), {{"Authorization", "Bearer test-key"}}).status, 200);
  // OpenAI routes keep OpenAI's shape, and take x-api-key too.
  Reply o = post(served_->port, "/v1/responses", R"({"input": "hi", "max_output_tokens": 2})");
  EXPECT_EQ(o.status, 401);
  EXPECT_EQ(o.parsed()["error"]["type"], "authentication_error") << o.body;
  EXPECT_EQ(post(served_->port, "/v1/responses", R"({"input": "hi", "max_output_tokens": 2})", {{"x-api-key", "test-key"}})
                .status,
            200);
  // Malformed JSON: Anthropic's shape too.
  Reply j = post(served_->port, "/v1/messages", "{not json", {{"x-api-key", "test-key"}});
  expect_anthropic_error(j, 400, invalid, "JSON");
}

TEST_F(ServerMessages, ThinkingBlocksWithinTheBudget) {
  ServeOptions o;
  o.engine.n_parallel = 2;
  o.n_threads = 2;
  o.server.chat_template = messages_file_text(std::string(UBATCH_TESTS_DIR) + "/data/think_chatml.jinja");
  auto s = serve_model(::ubatch::test::smollm2_model(), o);
  ASSERT_TRUE(s);
  constexpr int kBudget = 6;
  json body = messages_ask(16);
  body["thinking"] = {{"type", "enabled"}, {"budget_tokens", kBudget}};
  Reply r = post(s->port, "/v1/messages", body.dump());
  ASSERT_EQ(r.status, 200) << r.body;
  const json m = r.parsed();
  ASSERT_GE(m["content"].size(), 2u) << r.body;
  EXPECT_EQ(m["content"][0]["type"], "thinking") << r.body;
  const std::string thinking = m["content"][0]["thinking"];
  EXPECT_FALSE(thinking.empty());
  // Within the budget (its tokens re-tokenized), then an answer.
  EXPECT_LE(s->tokenizer->tokenize(thinking, false, false).size(), static_cast<size_t>(kBudget + 1)) << thinking;
  EXPECT_EQ(m["content"][1]["type"], "text") << r.body;
  EXPECT_FALSE(m["content"][1]["text"].get<std::string>().empty()) << r.body;
  // Streamed: a thinking block of thinking_delta, then a text block; the same text.
  body["stream"] = true;
  Reply st = post(s->port, "/v1/messages", body.dump());
  ASSERT_EQ(st.status, 200) << st.body;
  std::string streamed_thinking, streamed_text;
  std::vector<std::string> blocks;
  for (const auto& [name, data] : sse_named_events(st.body)) {
    if (name == "content_block_start") blocks.push_back(data["content_block"]["type"]);
    if (name == "content_block_delta" && data["delta"]["type"] == "thinking_delta")
      streamed_thinking += data["delta"]["thinking"].get<std::string>();
    if (name == "content_block_delta" && data["delta"]["type"] == "text_delta")
      streamed_text += data["delta"]["text"].get<std::string>();
  }
  EXPECT_EQ(blocks, std::vector<std::string>({"thinking", "text"})) << st.body;
  EXPECT_EQ(streamed_thinking, thinking);
  EXPECT_EQ(streamed_text, m["content"][1]["text"]);
  // thinking disabled: the template closes the block (enable_thinking false), no thinking block.
  body["thinking"] = {{"type", "disabled"}};
  body["stream"] = false;
  Reply off = post(s->port, "/v1/messages", body.dump());
  ASSERT_EQ(off.status, 200) << off.body;
  for (const json& b : off.parsed()["content"]) EXPECT_NE(b["type"], "thinking") << off.body;
  // Thinking in an earlier assistant turn is rendered as the template asks.
  json hist = messages_ask(2);
  hist["messages"] = json::array({{{"role", "user"}, {"content", "Hi"}},
                                  {{"role", "assistant"},
                                   {"content", json::array({{{"type", "thinking"}, {"thinking", "They greet me."}, {"signature", "x"}},
                                                            {{"type", "text"}, {"text", "Hello!"}}})}},
                                  {{"role", "user"}, {"content", "Bye"}}});
  Reply h = post(s->port, "/v1/messages/count_tokens", hist.dump());
  hist["messages"][1]["content"].erase(0);
  Reply h0 = post(s->port, "/v1/messages/count_tokens", hist.dump());
  ASSERT_EQ(h.status, 200) << h.body;
  ASSERT_EQ(h0.status, 200) << h0.body;
  EXPECT_GT(h.parsed()["input_tokens"].get<int>(), h0.parsed()["input_tokens"].get<int>());
}

}  // namespace
}  // namespace ubatch::test
