// The model's own Jinja template through the real server (issue 23, items 2 and 4), on the
// default model served with --chat-template set to corpus templates
// (../shared/reference/templates): /apply-template gives the reference's text (plain
// conversation, tools, a continued assistant message, chat_template_kwargs); a required call
// comes back in the template's own format (Qwen 2.5: hermes) streamed and not; a template's
// raise_exception is a 400 carrying its message, streaming included; bad tool arguments are a
// 400; `ubatch run --chat --show-prompt` prints the prompt.
#include "test_server_fixture.h"

#include <cctype>
#include <fstream>
#include <map>

namespace ubatch::test {
namespace {

using ojson = nlohmann::ordered_json;  // request bodies keep the cases' key order (it reaches |tojson)

ojson read_json_file(const std::string& path) {
  std::ifstream in(path);
  return ojson::parse(in);
}

std::string read_file_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

class ServerChatTemplate : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!std::filesystem::exists(default_model()) || !have_reference()) return;
    const std::string dir = reference_path("templates/");
    cases_ = new ojson(read_json_file(dir + "cases.json"));
    expected_ = new ojson(read_json_file(dir + "expected.json"));
    for (const char* id : {"Qwen-Qwen2.5-7B-Instruct", "Qwen3.5-4B", "meta-llama-Llama-3.1-8B-Instruct"}) {
      ServeOptions o;
      o.engine.n_parallel = 2;
      o.engine.n_batch = 256;
      o.n_ctx = 4096;
      o.n_threads = 2;
      o.server.chat_template = read_file_text(dir + id + ".jinja");
      servers_[id] = serve_model(default_model(), o).release();
    }
  }
  static void TearDownTestSuite() {
    for (auto& [id, s] : servers_) delete s;
    servers_.clear();
    delete cases_;
    delete expected_;
    cases_ = expected_ = nullptr;
  }
  void SetUp() override {
    UBATCH_REQUIRE_DEFAULT_MODEL();
    UBATCH_REQUIRE_REFERENCE();
    for (auto& [id, s] : servers_) ASSERT_NE(s, nullptr) << id;
  }
  static int port(const std::string& id) { return servers_.at(id)->port; }
  static ojson case_of(const std::string& id) {
    for (const ojson& c : (*cases_)["cases"])
      if (c["id"] == id) return c;
    return ojson();
  }
  static std::map<std::string, ServedModel*> servers_;
  static ojson* cases_;
  static ojson* expected_;
};
std::map<std::string, ServedModel*> ServerChatTemplate::servers_;
ojson* ServerChatTemplate::cases_ = nullptr;
ojson* ServerChatTemplate::expected_ = nullptr;

const json kWeatherTool = json::parse(R"([{"type": "function", "function": {"name": "get_weather",
  "description": "Get the current weather for a city.", "parameters": {"type": "object",
  "properties": {"city": {"type": "string", "maxLength": 30}}, "required": ["city"]}}}])");

// The prompt is the reference's text (Qwen 2.5 and 3.5 read neither bos_token nor eos_token,
// so the default model's token texts change nothing).
TEST_F(ServerChatTemplate, ApplyTemplateGivesTheReferenceText) {
  struct Check {
    const char* tmpl;
    const char* case_id;
  };
  for (const Check& c : {Check{"Qwen-Qwen2.5-7B-Instruct", "c1_user"}, Check{"Qwen-Qwen2.5-7B-Instruct", "c3_multi_turn"},
                         Check{"Qwen-Qwen2.5-7B-Instruct", "c5_tools"}, Check{"Qwen-Qwen2.5-7B-Instruct", "c4_continue"},
                         Check{"Qwen-Qwen2.5-7B-Instruct", "c6a_tool_history_args_object"},
                         Check{"Qwen3.5-4B", "c11_thinking_off"}, Check{"Qwen3.5-4B", "c3_multi_turn"}}) {
    SCOPED_TRACE(std::string(c.tmpl) + " " + c.case_id);
    const ojson cs = case_of(c.case_id);
    ojson body = {{"messages", cs["messages"]}};
    if (!cs["tools"].is_null()) body["tools"] = cs["tools"];
    if (cs.contains("extra_vars")) body["chat_template_kwargs"] = cs["extra_vars"];
    Reply r = post(port(c.tmpl), "/apply-template", body.dump());
    ASSERT_EQ(r.status, 200) << r.body;
    EXPECT_EQ(r.parsed()["prompt"].get<std::string>(), (*expected_)[c.tmpl][c.case_id]["output"].get<std::string>());
  }
  // Arguments sent as a JSON string (OpenAI's shape) are parsed before rendering: the prompt
  // is the one of the same call with an object (the reference renders the string as-is).
  for (const char* id : {"c6a_tool_history_args_object", "c6b_tool_history_args_string"}) {
    const ojson cs = case_of(id);
    Reply r = post(port("Qwen-Qwen2.5-7B-Instruct"), "/apply-template",
                   ojson{{"messages", cs["messages"]}, {"tools", cs["tools"]}}.dump());
    ASSERT_EQ(r.status, 200) << r.body;
    EXPECT_EQ(r.parsed()["prompt"].get<std::string>(),
              (*expected_)["Qwen-Qwen2.5-7B-Instruct"]["c6a_tool_history_args_object"]["output"].get<std::string>())
        << id;
  }
  // chat_template_kwargs changes the prompt (Qwen 3.5's thinking switch).
  ojson body = {{"messages", case_of("c3_multi_turn")["messages"]}};
  const json on = post(port("Qwen3.5-4B"), "/apply-template", body.dump()).parsed();
  body["chat_template_kwargs"] = {{"enable_thinking", false}};
  const json off = post(port("Qwen3.5-4B"), "/apply-template", body.dump()).parsed();
  EXPECT_NE(on["prompt"], off["prompt"]);
}

// tool_choice required with Qwen 2.5's template: the call in its hermes format, parsed back.
TEST_F(ServerChatTemplate, RequiredCallInTheTemplatesFormat) {
  json body = {{"messages", json::array({{{"role", "user"}, {"content", "Weather in Paris?"}}})},
               {"tools", kWeatherTool},
               {"tool_choice", "required"},
               {"parallel_tool_calls", false},
               {"max_tokens", 64},
               {"temperature", 0}};
  const json t = post(port("Qwen-Qwen2.5-7B-Instruct"), "/apply-template", body.dump()).parsed();
  EXPECT_EQ(t["tool_format"], "hermes");
  Reply r = post(port("Qwen-Qwen2.5-7B-Instruct"), "/v1/chat/completions", body.dump());
  ASSERT_EQ(r.status, 200) << r.body;
  const json choice = r.parsed()["choices"][0];
  EXPECT_EQ(choice["finish_reason"], "tool_calls") << r.body;
  ASSERT_EQ(choice["message"]["tool_calls"].size(), 1u) << r.body;
  const json call = choice["message"]["tool_calls"][0];
  EXPECT_EQ(call["function"]["name"], "get_weather");
  const json args = json::parse(call["function"]["arguments"].get<std::string>());
  EXPECT_TRUE(args["city"].is_string()) << args;
  // Streamed: the same call (greedy), sent whole once complete (one delta).
  body["stream"] = true;
  const StreamResult s = post_stream(port("Qwen-Qwen2.5-7B-Instruct"), "/v1/chat/completions", body);
  ASSERT_EQ(s.status, 200);
  EXPECT_TRUE(s.done);
  std::string arguments, name;
  int pieces = 0;
  for (const json& chunk : s.chunks) {
    for (const json& c : chunk["choices"]) {
      if (!c["delta"].contains("tool_calls")) continue;
      for (const json& d : c["delta"]["tool_calls"]) {
        if (d.contains("id")) name = d["function"]["name"];
        arguments += d["function"]["arguments"].get<std::string>();
        ++pieces;
      }
    }
  }
  EXPECT_EQ(s.finish.at(0), "tool_calls");
  EXPECT_EQ(name, "get_weather");
  EXPECT_EQ(arguments, call["function"]["arguments"]);
  EXPECT_EQ(pieces, 1);
}

// raise_exception: a 400 with the template's words, before any token — streamed requests too.
TEST_F(ServerChatTemplate, TemplateErrorIsA400WithItsMessage) {
  const json two_calls = json::parse(R"([{"role": "user", "content": "Weather?"},
    {"role": "assistant", "content": null, "tool_calls": [
      {"id": "a", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}},
      {"id": "b", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\": \"Rome\"}"}}]},
    {"role": "tool", "tool_call_id": "a", "content": "sunny"}])");
  for (bool stream : {false, true}) {
    SCOPED_TRACE(stream ? "stream" : "no stream");
    json body = {{"messages", two_calls}, {"tools", kWeatherTool}, {"stream", stream}, {"max_tokens", 4}};
    Reply r = post(port("meta-llama-Llama-3.1-8B-Instruct"), "/v1/chat/completions", body.dump());
    EXPECT_EQ(r.status, 400) << r.body;
    const json e = r.parsed();
    ASSERT_TRUE(e.contains("error")) << r.body;
    EXPECT_EQ(e["error"]["code"], "template_error");
    EXPECT_EQ(e["error"]["message"], "chat template: This model only supports single tool-calls at once!");
  }
  // Arguments that are not JSON: a 400 naming them.
  json bad = json::parse(R"([{"role": "user", "content": "Weather?"}, {"role": "assistant", "content": null,
    "tool_calls": [{"id": "a", "type": "function", "function": {"name": "get_weather", "arguments": "{city: Paris"}}]}])");
  Reply r = post(port("Qwen-Qwen2.5-7B-Instruct"), "/v1/chat/completions", json{{"messages", bad}}.dump());
  EXPECT_EQ(r.status, 400);
  EXPECT_EQ(r.parsed()["error"]["code"], "invalid_tool_arguments") << r.body;
}

// SmolLM2-135M-Instruct (where models/ has it): its own template with its default system
// prompt; a chat request's prompt is the template's rendering token for token — the same
// count as the rendered text sent as a raw completion prompt (special tokens parsed).
TEST(ServerChatTemplateSmolLM2, ChatPromptIsTheTemplatesRendering) {
  std::string model;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(std::filesystem::path(default_model()).parent_path(), ec)) {
    std::string name = e.path().filename().string();
    for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    if (name.find("smollm2") != std::string::npos && name.find("instruct") != std::string::npos &&
        name.size() > 5 && name.substr(name.size() - 5) == ".gguf")
      model = e.path().string();
  }
  if (model.empty()) GTEST_SKIP() << "no SmolLM2-135M-Instruct GGUF beside the default model";
  ServeOptions o;
  o.engine.n_parallel = 2;
  o.n_ctx = 2048;
  o.n_threads = 2;
  auto served = serve_model(model, o);
  ASSERT_NE(served, nullptr);
  const json messages = json::array({{{"role", "user"}, {"content", "What is 2+2? <|im_end|>"}}});
  Reply t = post(served->port, "/apply-template", json{{"messages", messages}}.dump());
  ASSERT_EQ(t.status, 200) << t.body;
  const std::string prompt = t.parsed()["prompt"];
  EXPECT_EQ(prompt.rfind("<|im_start|>system\nYou are a helpful AI assistant named SmolLM", 0), 0u) << prompt;
  Reply chat = post(served->port, "/v1/chat/completions", json{{"messages", messages}, {"max_tokens", 1}}.dump());
  ASSERT_EQ(chat.status, 200) << chat.body;
  // The raw prompt parses the user's typed <|im_end|> as a special token; the chat prompt
  // does not: so compare with the look-alike removed from both.
  const json plain = json::array({{{"role", "user"}, {"content", "What is 2+2?"}}});
  const std::string plain_prompt = post(served->port, "/apply-template", json{{"messages", plain}}.dump()).parsed()["prompt"];
  Reply chat_plain = post(served->port, "/v1/chat/completions", json{{"messages", plain}, {"max_tokens", 1}}.dump());
  Reply raw = post(served->port, "/v1/completions", json{{"prompt", plain_prompt}, {"max_tokens", 1}}.dump());
  ASSERT_EQ(raw.status, 200) << raw.body;
  EXPECT_EQ(chat_plain.parsed()["usage"]["prompt_tokens"], raw.parsed()["usage"]["prompt_tokens"]);
  // The typed look-alike costs text tokens, not one special token.
  EXPECT_GT(chat.parsed()["usage"]["prompt_tokens"].get<int>(), chat_plain.parsed()["usage"]["prompt_tokens"].get<int>() + 1);
}

TEST(RunShowPrompt, PrintsTheChatPrompt) {
  UBATCH_REQUIRE_DEFAULT_MODEL();
  if (!std::filesystem::exists(ubatch_binary())) GTEST_SKIP() << "ubatch binary not built at " << ubatch_binary();
  int status = -1;
  const std::string out = run_command(ubatch_command() + " run -m " + default_model() +
                                          " --chat --show-prompt -p 'Hi <end_of_turn>' 2>/dev/null",
                                      &status);
  EXPECT_EQ(status, 0);
  EXPECT_EQ(out, "<start_of_turn>user\nHi <end_of_turn><end_of_turn>\n<start_of_turn>model\n");
}

}  // namespace
}  // namespace ubatch::test
