// Reasoning in chat replies (issue 33, item 1; docs/API.md, "Reasoning") through the real
// server on the embedded chat model, SmolLM2-135M-Instruct, served with thinking templates:
// our own small ChatML template that opens a <think> block (tests/data/think_chatml.jinja)
// and Qwen 3.5's (../shared/reference/templates). reasoning_content apart from content,
// streamed as delta.reasoning_content and equal to the unstreamed reply; reasoning_format none
// keeps today's text; the server's --reasoning-format; enable_thinking false through
// chat_template_kwargs; reasoning_content in the history rendered as each template asks; the
// 400s; reasoning_budget_tokens closing the block (then an answer, or a required tool call).
// The model was not trained to close the block: its replies are reasoning until
// max_tokens, and the split is checked against the raw text of the same reply.
#include "test_server_fixture.h"

#include <fstream>

#include "chat/reasoning.h"

namespace ubatch::test {
namespace {

std::string file_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

std::unique_ptr<ServedModel> serve_with(const std::string& model, const std::string& tmpl,
                                        chat::ReasoningFormat rf = chat::ReasoningFormat::Auto) {
  ServeOptions o;
  o.engine.n_parallel = 2;
  o.n_ctx = 2048;
  o.n_threads = 2;
  o.server.chat_template = tmpl;
  o.server.reasoning_format = rf;
  return serve_model(model, o);
}

json ask(int max_tokens = 24) {
  return json{{"messages", json::array({{{"role", "user"}, {"content", "Why is the sky blue?"}}})},
              {"max_tokens", max_tokens},
              {"temperature", 0}};
}

// The streamed reply: (reasoning_content, content) concatenated over the deltas.
std::pair<std::string, std::string> streamed(int port, json body) {
  body["stream"] = true;
  StreamResult r = post_stream(port, "/v1/chat/completions", body);
  EXPECT_EQ(r.status, 200);
  EXPECT_TRUE(r.done);
  std::string reasoning;
  for (const json& chunk : r.chunks)
    for (const json& c : chunk.value("choices", json::array()))
      if (c.contains("delta") && c["delta"].contains("reasoning_content"))
        reasoning += c["delta"]["reasoning_content"].get<std::string>();
  return {reasoning, r.text[0]};
}

class ServerReasoning : public ::testing::Test {
 protected:
  void SetUp() override {
    model_ = smollm2_model();
    if (!std::filesystem::exists(model_)) GTEST_SKIP() << "no SmolLM2-135M-Instruct GGUF at " << model_ << " (scripts/setup.sh)";
  }
  std::string model_;
  const std::string own_ = file_text(std::string(UBATCH_TESTS_DIR) + "/data/think_chatml.jinja");
};

TEST_F(ServerReasoning, SeparatedStreamedAndAsTheRawText) {
  auto s = serve_with(model_, own_);
  ASSERT_TRUE(s);
  // The raw reply (reasoning_format none: today's behaviour, everything in content).
  json none = ask();
  none["reasoning_format"] = "none";
  Reply raw = post(s->port, "/v1/chat/completions", none.dump());
  ASSERT_EQ(raw.status, 200) << raw.body;
  const json raw_msg = raw.parsed()["choices"][0]["message"];
  EXPECT_FALSE(raw_msg.contains("reasoning_content"));
  const std::string text = raw_msg["content"];
  ASSERT_FALSE(text.empty());
  // The template opens a block: split as chat::split_reasoning splits the same text.
  Reply r = post(s->port, "/v1/chat/completions", ask().dump());
  ASSERT_EQ(r.status, 200) << r.body;
  const json msg = r.parsed()["choices"][0]["message"];
  const chat::ReasoningSplit want = chat::split_reasoning(text, true);
  ASSERT_TRUE(msg.contains("reasoning_content")) << msg;
  EXPECT_EQ(msg["reasoning_content"], want.reasoning);
  EXPECT_EQ(msg["content"], want.content);
  EXPECT_FALSE(want.reasoning.empty());
  // Streamed: the same, as delta.reasoning_content and delta.content.
  const auto [reasoning, content] = streamed(s->port, ask());
  EXPECT_EQ(reasoning, want.reasoning);
  EXPECT_EQ(content, want.content);
  // "deepseek" and "auto" agree here; none streamed keeps everything in content.
  json ds = ask();
  ds["reasoning_format"] = "deepseek";
  EXPECT_EQ(post(s->port, "/v1/chat/completions", ds.dump()).parsed()["choices"][0]["message"], msg);
  const auto [r2, c2] = streamed(s->port, none);
  EXPECT_EQ(r2, "");
  EXPECT_EQ(c2, text);
}

TEST_F(ServerReasoning, ServerFlagNoneAndEnableThinkingFalse) {
  auto off = serve_with(model_, own_, chat::ReasoningFormat::None);  // --reasoning-format none
  ASSERT_TRUE(off);
  Reply r = post(off->port, "/v1/chat/completions", ask(8).dump());
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_FALSE(r.parsed()["choices"][0]["message"].contains("reasoning_content")) << r.body;
  json on = ask(8);
  on["reasoning_format"] = "auto";  // a request may ask for it
  EXPECT_TRUE(post(off->port, "/v1/chat/completions", on.dump()).parsed()["choices"][0]["message"].contains(
      "reasoning_content"));

  auto s = serve_with(model_, own_);
  ASSERT_TRUE(s);
  json no_think = ask(8);
  no_think["chat_template_kwargs"] = {{"enable_thinking", false}};
  Reply p = post(s->port, "/apply-template", no_think.dump());
  ASSERT_EQ(p.status, 200) << p.body;
  const std::string prompt = p.parsed()["prompt"];
  const std::string closed = "<|im_start|>assistant\n<think>\n\n</think>\n\n";
  ASSERT_GE(prompt.size(), closed.size());
  EXPECT_EQ(prompt.substr(prompt.size() - closed.size()), closed) << prompt;
  Reply a = post(s->port, "/v1/chat/completions", no_think.dump());
  ASSERT_EQ(a.status, 200) << a.body;
  const json msg = a.parsed()["choices"][0]["message"];
  // The block is closed in the prompt: the reply is the answer (reasoning only if it opens one).
  const std::string content = msg["content"];
  EXPECT_EQ(msg.contains("reasoning_content"), content.find("<think>") == 0) << msg;
}

TEST_F(ServerReasoning, HistoryRenderedAsTheTemplateAsks) {
  const json messages = json::parse(R"([{"role": "user", "content": "What is 2+2?"},
    {"role": "assistant", "content": "2 + 2 = 4.", "reasoning_content": "Simple arithmetic: 2 plus 2 is 4."},
    {"role": "user", "content": "And multiplied by 3?"}])");
  auto s = serve_with(model_, own_);
  ASSERT_TRUE(s);
  Reply p = post(s->port, "/apply-template", json{{"messages", messages}}.dump());
  ASSERT_EQ(p.status, 200) << p.body;
  EXPECT_NE(p.parsed()["prompt"].get<std::string>().find(
                "<|im_start|>assistant\n<think>\nSimple arithmetic: 2 plus 2 is 4.\n</think>\n\n2 + 2 = 4.<|im_end|>"),
            std::string::npos)
      << p.body;
  if (!have_reference()) GTEST_SKIP() << "no ../shared/reference: Qwen 3.5's template not checked";
  // Qwen 3.5 drops reasoning of turns before the last user message (the reference's c12 text),
  // and it thinks: detected from its source, its reply split.
  const std::string dir = reference_path("templates/");
  auto q = serve_with(model_, file_text(dir + "Qwen3.5-4B.jinja"));
  ASSERT_TRUE(q);
  std::ifstream in(dir + "expected.json");
  const json expected = json::parse(in)["Qwen3.5-4B"]["c12_reasoning_history"]["output"];
  Reply qp = post(q->port, "/apply-template", json{{"messages", messages}}.dump());
  ASSERT_EQ(qp.status, 200) << qp.body;
  EXPECT_EQ(qp.parsed()["prompt"], expected);
  Reply qa = post(q->port, "/v1/chat/completions", json{{"messages", messages}, {"max_tokens", 6}, {"temperature", 0}}.dump());
  ASSERT_EQ(qa.status, 200) << qa.body;
  EXPECT_TRUE(qa.parsed()["choices"][0]["message"].contains("reasoning_content")) << qa.body;
}

// reasoning_budget_tokens: after that many tokens in the open block the server writes the
// template's close ("\n</think>\n\n") and the answer follows; streamed the same. SmolLM2 never
// closes the block itself, so without the budget it reasons until max_tokens.
TEST_F(ServerReasoning, BudgetClosesTheBlockAndTheAnswerFollows) {
  auto s = serve_with(model_, own_);
  ASSERT_TRUE(s);
  for (int budget : {0, 8}) {
    SCOPED_TRACE("budget " + std::to_string(budget));
    json raw_body = ask(32);
    raw_body["reasoning_budget_tokens"] = budget;
    raw_body["reasoning_format"] = "none";
    raw_body["logprobs"] = true;
    Reply raw = post(s->port, "/v1/chat/completions", raw_body.dump());
    ASSERT_EQ(raw.status, 200) << raw.body;
    const json choice = raw.parsed()["choices"][0];
    const std::string text = choice["message"]["content"];
    // The first `budget` tokens are the model's reasoning, then the forced close.
    std::string reasoning_tokens_text;
    const json& lp = choice["logprobs"]["content"];
    ASSERT_GT(lp.size(), static_cast<size_t>(budget));
    for (int i = 0; i < budget; ++i) reasoning_tokens_text += lp[static_cast<size_t>(i)]["token"].get<std::string>();
    EXPECT_EQ(reasoning_tokens_text.find("</think>"), std::string::npos);
    EXPECT_EQ(text.rfind(reasoning_tokens_text + "\n</think>\n\n", 0), 0u) << text;
    // Split: reasoning within the budget, then an answer.
    json body = ask(32);
    body["reasoning_budget_tokens"] = budget;
    Reply r = post(s->port, "/v1/chat/completions", body.dump());
    ASSERT_EQ(r.status, 200) << r.body;
    const json msg = r.parsed()["choices"][0]["message"];
    const chat::ReasoningSplit want = chat::split_reasoning(text, true);
    EXPECT_EQ(msg["reasoning_content"], want.reasoning);
    EXPECT_EQ(msg["content"], want.content);
    EXPECT_FALSE(want.content.empty()) << text;
    const auto [reasoning, content] = streamed(s->port, body);
    EXPECT_EQ(reasoning, want.reasoning);
    EXPECT_EQ(content, want.content);
  }
}

// Tool calls after reasoning: under tool_choice required the grammar admits the reasoning, its
// close, then the calls; the budget closes the block and the call follows.
TEST_F(ServerReasoning, ToolCallAfterBudgetedReasoning) {
  auto s = serve_with(model_, own_);
  ASSERT_TRUE(s);
  json body = ask(96);
  body["messages"] = json::array({{{"role", "user"}, {"content", "Weather in Paris?"}}});
  body["tools"] = json::parse(R"([{"type": "function", "function": {"name": "get_weather", "parameters":
    {"type": "object", "properties": {"city": {"type": "string", "maxLength": 20}}, "required": ["city"]}}}])");
  body["tool_choice"] = "required";
  body["parallel_tool_calls"] = false;
  body["reasoning_budget_tokens"] = 10;
  Reply r = post(s->port, "/v1/chat/completions", body.dump());
  ASSERT_EQ(r.status, 200) << r.body;
  const json choice = r.parsed()["choices"][0];
  EXPECT_EQ(choice["finish_reason"], "tool_calls") << r.body;
  EXPECT_TRUE(choice["message"]["reasoning_content"].is_string()) << r.body;
  ASSERT_EQ(choice["message"]["tool_calls"].size(), 1u) << r.body;
  EXPECT_EQ(choice["message"]["tool_calls"][0]["function"]["name"], "get_weather");
}

TEST_F(ServerReasoning, BadValuesAre400) {
  auto s = serve_with(model_, own_);
  ASSERT_TRUE(s);
  const std::vector<std::pair<json, std::string>> bad = {
      {{{"reasoning_format", "bogus"}}, "reasoning_format"},
      {{{"reasoning_format", 5}}, "reasoning_format"},
      {{{"reasoning_budget_tokens", -1}}, "reasoning_budget_tokens"},
      {{{"reasoning_budget_tokens", 1e12}}, "reasoning_budget_tokens"},
      {{{"reasoning_budget_tokens", "8"}}, "reasoning_budget_tokens"},
      {{{"reasoning_budget_tokens", 4}}, "reasoning_budget_tokens"},  // not below max_tokens (4)
      {{{"chat_template_kwargs", {{"bos_token", "<|im_start|>"}}}}, "chat_template_kwargs"},
      {{{"chat_template_kwargs", {{"add_generation_prompt", false}}}}, "chat_template_kwargs"},
      {{{"messages", json::parse(R"([{"role": "assistant", "content": "x", "reasoning_content": 5},
                                      {"role": "user", "content": "y"}])")}},
       "messages"},
  };
  for (const auto& [extra, param] : bad) {
    json body = ask(4);
    body.update(extra);
    for (const char* path : {"/v1/chat/completions", "/apply-template"}) {
      if (param == "reasoning_budget_tokens" && extra["reasoning_budget_tokens"] == 4 &&
          std::string(path) == "/apply-template")
        continue;  // generates nothing: no max_tokens to compare with
      Reply r = post(s->port, path, body.dump());
      EXPECT_EQ(r.status, 400) << path << " " << body.dump() << " " << r.body;
      EXPECT_EQ(r.parsed()["error"]["param"], param) << r.body;
    }
  }
}

}  // namespace
}  // namespace ubatch::test
