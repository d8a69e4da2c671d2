// POST /v1/responses (issue 33, item 2; docs/API.md, "Three wire formats") through the real
// server on the embedded chat model, SmolLM2-135M-Instruct: the same reply as the chat path
// for the same conversation, usage, "incomplete" at max_output_tokens, the streamed event
// sequence (types, sequence numbers, deltas adding up to the unstreamed text), a tool round
// trip (function_call, then function_call_output), structured output through text.format,
// reasoning items with a thinking template (tests/data/think_chatml.jinja), and the 400s in
// OpenAI's error shape.
#include "test_server_fixture.h"

#include <fstream>

namespace ubatch::test {
namespace {

std::string responses_file_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

const json kResponsesWeather = {
    {"type", "function"},
    {"name", "get_weather"},
    {"description", "Get the current weather for a city."},
    {"parameters",
     {{"type", "object"},
      {"properties", {{"city", {{"type", "string"}, {"maxLength", 20}}}}},
      {"required", {"city"}},
      {"additionalProperties", false}}}};

class ServerResponses : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!std::filesystem::exists(::ubatch::test::smollm2_model())) return;
    ServeOptions o;
    o.engine.n_parallel = 2;
    o.n_threads = 2;
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
  static int port() { return served_->port; }
  static ServedModel* served_;
};
ServedModel* ServerResponses::served_ = nullptr;

json responses_ask(int max_output_tokens = 8) {
  return {{"input", "Why is the sky blue?"}, {"max_output_tokens", max_output_tokens}, {"temperature", 0}};
}

// The text of a response's message items.
std::string responses_text(const json& r) {
  std::string text;
  for (const json& item : r["output"])
    if (item["type"] == "message")
      for (const json& part : item["content"]) text += part["text"].get<std::string>();
  return text;
}

void expect_openai_error(const Reply& r, const std::string& param, const std::string& words) {
  EXPECT_EQ(r.status, 400) << r.body;
  const json e = r.parsed();
  ASSERT_TRUE(e.contains("error")) << r.body;
  EXPECT_EQ(e["error"]["type"], "invalid_request_error") << r.body;
  EXPECT_EQ(e["error"]["param"], param) << r.body;
  EXPECT_NE(e["error"]["message"].get<std::string>().find(words), std::string::npos) << r.body;
}

TEST_F(ServerResponses, SameReplyAsChatUsageAndIncomplete) {
  Reply r = post(port(), "/v1/responses", responses_ask().dump());
  ASSERT_EQ(r.status, 200) << r.body;
  const json resp = r.parsed();
  EXPECT_EQ(resp["object"], "response");
  EXPECT_EQ(resp["id"].get<std::string>().rfind("resp_", 0), 0u);
  EXPECT_EQ(resp["status"], "incomplete");  // 8 tokens cannot finish the answer
  EXPECT_EQ(resp["incomplete_details"]["reason"], "max_output_tokens");
  EXPECT_EQ(resp["store"], false);
  EXPECT_EQ(resp["max_output_tokens"], 8);
  ASSERT_EQ(resp["output"].size(), 1u) << r.body;
  EXPECT_EQ(resp["output"][0]["type"], "message");
  EXPECT_EQ(resp["output"][0]["role"], "assistant");
  const json& u = resp["usage"];
  EXPECT_EQ(u["output_tokens"], 8);
  EXPECT_GT(u["input_tokens"].get<int>(), 5);
  EXPECT_EQ(u["total_tokens"], u["input_tokens"].get<int>() + 8);
  EXPECT_EQ(u["output_tokens_details"]["reasoning_tokens"], 0);
  EXPECT_TRUE(u["input_tokens_details"].contains("cached_tokens"));
  // One request model: the chat route gives the same reply for the same conversation.
  const json chat = {{"messages", json::array({{{"role", "user"}, {"content", "Why is the sky blue?"}}})},
                     {"max_tokens", 8},
                     {"temperature", 0}};
  Reply c = post(port(), "/v1/chat/completions", chat.dump());
  ASSERT_EQ(c.status, 200) << c.body;
  EXPECT_EQ(responses_text(resp), c.parsed()["choices"][0]["message"]["content"]);
  EXPECT_EQ(c.parsed()["usage"]["prompt_tokens"], u["input_tokens"]);
  // Items as input, with instructions: a system message first.
  json items = responses_ask(4);
  items["instructions"] = "Answer briefly.";
  items["input"] = json::array({{{"role", "user"}, {"content", json::array({{{"type", "input_text"}, {"text", "Hi"}}})}},
                                {{"type", "message"}, {"role", "assistant"}, {"content", "Hello!"}},
                                {{"role", "user"}, {"content", "Why is the sky blue?"}}});
  Reply ri = post(port(), "/v1/responses", items.dump());
  ASSERT_EQ(ri.status, 200) << ri.body;
  EXPECT_EQ(ri.parsed()["instructions"], "Answer briefly.");
  EXPECT_GT(ri.parsed()["usage"]["input_tokens"].get<int>(), u["input_tokens"].get<int>());
}

TEST_F(ServerResponses, StreamedEventSequence) {
  const std::string whole = responses_text(post(port(), "/v1/responses", responses_ask(6).dump()).parsed());
  json body = responses_ask(6);
  body["stream"] = true;
  Reply r = post(port(), "/v1/responses", body.dump());
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_NE(r.headers.find("Content-Type") == r.headers.end() ? std::string() : r.headers.find("Content-Type")->second,
            "application/json");
  const auto events = sse_named_events(r.body);
  ASSERT_GE(events.size(), 9u) << r.body;
  std::vector<std::string> types;
  std::string deltas;
  for (size_t i = 0; i < events.size(); ++i) {
    const auto& [name, data] = events[i];
    EXPECT_EQ(data["type"], name);
    EXPECT_EQ(data["sequence_number"], static_cast<int>(i));
    if (name == "response.output_text.delta") {
      deltas += data["delta"].get<std::string>();
      if (types.back() == name) continue;  // one entry per run of deltas
    }
    types.push_back(name);
  }
  const std::vector<std::string> want = {"response.created",          "response.in_progress",
                                         "response.output_item.added", "response.content_part.added",
                                         "response.output_text.delta", "response.output_text.done",
                                         "response.content_part.done", "response.output_item.done",
                                         "response.incomplete"};
  EXPECT_EQ(types, want);
  EXPECT_EQ(events[0].second["response"]["status"], "in_progress");
  const json& last = events.back().second["response"];
  EXPECT_EQ(last["status"], "incomplete");
  EXPECT_EQ(last["usage"]["output_tokens"], 6);
  EXPECT_EQ(deltas, whole);
  EXPECT_EQ(responses_text(last), whole);
  EXPECT_EQ(events[events.size() - 4].second["text"], whole);  // output_text.done
}

TEST_F(ServerResponses, ToolCallRoundTripStreamedAndNot) {
  json body = {{"input", "What is the weather in Paris?"},
               {"tools", json::array({kResponsesWeather})},
               {"tool_choice", "required"},
               {"parallel_tool_calls", false},
               {"max_output_tokens", 48},
               {"temperature", 0}};
  Reply r = post(port(), "/v1/responses", body.dump());
  ASSERT_EQ(r.status, 200) << r.body;
  const json resp = r.parsed();
  EXPECT_EQ(resp["status"], "completed") << r.body;
  json call;
  for (const json& item : resp["output"])
    if (item["type"] == "function_call") call = item;
  ASSERT_TRUE(call.is_object()) << r.body;
  EXPECT_EQ(call["name"], "get_weather");
  EXPECT_EQ(call["call_id"].get<std::string>().rfind("call_", 0), 0u);
  const json args = json::parse(call["arguments"].get<std::string>(), nullptr, false);
  ASSERT_TRUE(args.is_object()) << call;
  EXPECT_TRUE(args["city"].is_string());
  EXPECT_EQ(resp["tools"][0]["name"], "get_weather");  // echoed in the Responses shape
  // Streamed: the function_call item's events, arguments equal to the unstreamed call.
  body["stream"] = true;
  Reply s = post(port(), "/v1/responses", body.dump());
  ASSERT_EQ(s.status, 200) << s.body;
  std::vector<std::string> types;
  std::string streamed_args, done_args;
  for (const auto& [name, data] : sse_named_events(s.body)) {
    if (name == "response.function_call_arguments.delta") {
      streamed_args += data["delta"].get<std::string>();
      if (types.back() == name) continue;
    }
    if (name == "response.function_call_arguments.done") done_args = data["arguments"];
    if (name == "response.output_item.added") {
      EXPECT_EQ(data["item"]["type"], "function_call");
    }
    types.push_back(name);
  }
  const std::vector<std::string> want = {"response.created",
                                         "response.in_progress",
                                         "response.output_item.added",
                                         "response.function_call_arguments.delta",
                                         "response.function_call_arguments.done",
                                         "response.output_item.done",
                                         "response.completed"};
  EXPECT_EQ(types, want) << s.body;
  EXPECT_EQ(streamed_args, call["arguments"]);
  EXPECT_EQ(done_args, call["arguments"]);
  // The round trip: the call and its output go back as input items.
  json next = {{"input", json::array({{{"role", "user"}, {"content", "What is the weather in Paris?"}},
                                      call,
                                      {{"type", "function_call_output"},
                                       {"call_id", call["call_id"]},
                                       {"output", "22 degrees and sunny"}}})},
               {"tools", json::array({kResponsesWeather})},
               {"max_output_tokens", 8},
               {"temperature", 0}};
  Reply r2 = post(port(), "/v1/responses", next.dump());
  ASSERT_EQ(r2.status, 200) << r2.body;
  EXPECT_GT(r2.parsed()["usage"]["input_tokens"].get<int>(), resp["usage"]["input_tokens"].get<int>());
}

TEST_F(ServerResponses, StructuredOutputThroughTextFormat) {
  const json schema = {{"type", "object"},
                       {"properties", {{"name", {{"type", "string"}, {"maxLength", 12}}}, {"age", {{"type", "integer"}}}}},
                       {"required", {"name", "age"}},
                       {"additionalProperties", false}};
  json body = {{"input", "Describe a person as JSON."},
               {"text", {{"format", {{"type", "json_schema"}, {"name", "person"}, {"schema", schema}, {"strict", true}}}}},
               {"max_output_tokens", 200},
               {"temperature", 0}};
  Reply r = post(port(), "/v1/responses", body.dump());
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.parsed()["status"], "completed") << r.body;
  const json out = json::parse(responses_text(r.parsed()), nullptr, false);
  ASSERT_TRUE(out.is_object()) << r.body;
  EXPECT_TRUE(out["name"].is_string());
  EXPECT_TRUE(out["age"].is_number_integer());
  EXPECT_EQ(r.parsed()["text"]["format"]["name"], "person");
  body["text"] = {{"format", {{"type", "json_object"}}}};
  Reply j = post(port(), "/v1/responses", body.dump());
  ASSERT_EQ(j.status, 200) << j.body;
  EXPECT_TRUE(json::parse(responses_text(j.parsed()), nullptr, false).is_object()) << j.body;
}

TEST_F(ServerResponses, BadInputIsA400InOpenAiShape) {
  auto with = [](json patch) {
    json b = responses_ask(4);
    b.update(patch);
    return b.dump();
  };
  expect_openai_error(post(port(), "/v1/responses", with({{"previous_response_id", "resp_1"}})), "previous_response_id",
                      "keeps no responses");
  expect_openai_error(post(port(), "/v1/responses", with({{"input", json::array({{{"type", "item_reference"}, {"id", "x"}}})}})),
                      "input", "item type 'item_reference' is not supported");
  expect_openai_error(
      post(port(), "/v1/responses",
           with({{"input", json::array({{{"type", "function_call_output"}, {"call_id", "call_9"}, {"output", "x"}}})}})),
      "input", "no earlier function_call");
  expect_openai_error(
      post(port(), "/v1/responses",
           with({{"input", json::array({{{"role", "user"},
                                         {"content", json::array({{{"type", "input_image"}, {"image_url", "x"}}})}}})}})),
      "input", "input_image");
  expect_openai_error(post(port(), "/v1/responses", with({{"tools", json::array({{{"type", "web_search"}}})}})), "tools",
                      "web_search");
  expect_openai_error(post(port(), "/v1/responses", with({{"max_output_tokens", 0}})), "max_output_tokens", ">= 1");
  expect_openai_error(post(port(), "/v1/responses", with({{"background", true}})), "background", "not supported");
  expect_openai_error(post(port(), "/v1/responses", R"({"max_output_tokens": 4})"), "input", "required");
  expect_openai_error(post(port(), "/v1/responses", with({{"text", {{"format", {{"type", "yaml"}}}}}})), "text", "yaml");
  // A bad schema is refused by the structured-output path, named as response_format.
  Reply bad = post(port(), "/v1/responses", with({{"temperature", 7}}));
  EXPECT_EQ(bad.status, 400) << bad.body;
  // The server still answers.
  EXPECT_EQ(post(port(), "/v1/responses", responses_ask(2).dump()).status, 200);
}

TEST_F(ServerResponses, ReasoningItemsWithAThinkingTemplate) {
  ServeOptions o;
  o.engine.n_parallel = 2;
  o.n_threads = 2;
  o.server.chat_template = responses_file_text(std::string(UBATCH_TESTS_DIR) + "/data/think_chatml.jinja");
  auto s = serve_model(::ubatch::test::smollm2_model(), o);
  ASSERT_TRUE(s);
  Reply r = post(s->port, "/v1/responses", responses_ask(10).dump());
  ASSERT_EQ(r.status, 200) << r.body;
  const json resp = r.parsed();
  ASSERT_GE(resp["output"].size(), 1u) << r.body;
  const json& item = resp["output"][0];
  EXPECT_EQ(item["type"], "reasoning") << r.body;
  ASSERT_EQ(item["content"].size(), 1u) << r.body;
  EXPECT_EQ(item["content"][0]["type"], "reasoning_text");
  const std::string reasoning = item["content"][0]["text"];
  EXPECT_FALSE(reasoning.empty());
  const int rt = resp["usage"]["output_tokens_details"]["reasoning_tokens"];
  EXPECT_GT(rt, 0);
  EXPECT_LE(rt, 10);
  // Streamed: a reasoning item with reasoning_text deltas adding up to the same text.
  json body = responses_ask(10);
  body["stream"] = true;
  Reply st = post(s->port, "/v1/responses", body.dump());
  ASSERT_EQ(st.status, 200) << st.body;
  std::string streamed;
  bool added = false;
  for (const auto& [name, data] : sse_named_events(st.body)) {
    if (name == "response.output_item.added" && data["item"]["type"] == "reasoning") added = true;
    if (name == "response.reasoning_text.delta") streamed += data["delta"].get<std::string>();
  }
  EXPECT_TRUE(added) << st.body;
  EXPECT_EQ(streamed, reasoning);
  // A reasoning item sent back goes to the next assistant turn (the template renders it).
  json back = responses_ask(2);
  back["input"] = json::array({{{"role", "user"}, {"content", "Hi"}},
                               {{"type", "reasoning"}, {"summary", json::array()}, {"content", json::array({{{"type", "reasoning_text"}, {"text", "They greet me."}}})}},
                               {{"role", "assistant"}, {"content", "Hello!"}},
                               {{"role", "user"}, {"content", "Bye"}}});
  Reply b = post(s->port, "/v1/responses", back.dump());
  ASSERT_EQ(b.status, 200) << b.body;
  back["input"][1]["content"][0]["text"] = "";
  Reply b0 = post(s->port, "/v1/responses", back.dump());
  ASSERT_EQ(b0.status, 200) << b0.body;
  EXPECT_GT(b.parsed()["usage"]["input_tokens"].get<int>(), b0.parsed()["usage"]["input_tokens"].get<int>());
}

}  // namespace
}  // namespace ubatch::test
