// gpt-oss's harmony channels through the real server (issue 33, item 1; docs/API.md,
// "Reasoning"), on the tiny random-weight gpt-oss of ../shared/reference/moe with the harmony
// markers added to its vocabulary as control tokens (zero embedding and output rows) and our
// harmony template (tests/data/harmony.jinja) as its chat template. The weights are random, so
// the text is not checked — the shapes are: reasoning_content, content and tool_calls as
// harmony reads the reply (the same streamed and not), reasoning_format none keeping the raw
// text, reasoning_effort reaching the template (top level and through chat_template_kwargs),
// a named tool choice answered with a call whose arguments follow the schema, <|end|> not
// ending generation where <|return|> and <|call|> do.
#include "test_server_fixture.h"

#include <filesystem>
#include <fstream>

#include "chat/harmony.h"
#include "gguf_rewrite.h"

namespace ubatch::test {
// A named namespace: the server tests build as unity batches, whose files' anonymous
// namespaces are one.
namespace server_harmony {

constexpr const char* kMarkers[] = {"<|start|>",   "<|end|>",     "<|message|>", "<|channel|>",
                                    "<|constrain|>", "<|return|>", "<|call|>"};

std::string file_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// The tiny gpt-oss with the harmony markers appended to its vocabulary (control tokens; their
// embedding and output rows zero) and the harmony template, written to a temporary file.
std::string harmony_model() {
  const std::string src = reference_path("moe/models/tiny-gptoss-f32.gguf");
  Result<std::unique_ptr<gguf::File>> f = gguf::File::open(src);
  if (!f) return ADD_FAILURE() << f.message(), std::string();
  const size_t n_new = std::size(kMarkers);
  Rewrite r;
  r.key = [&](const gguf::MetadataEntry& e, gguf::Writer& w) {
    if (e.key == "tokenizer.ggml.tokens") {
      std::vector<std::string> tokens(e.value.strings.begin(), e.value.strings.end());
      for (const char* m : kMarkers) tokens.emplace_back(m);
      w.add_string_array(e.key, tokens);
      return true;
    }
    if (e.key == "tokenizer.ggml.token_type" || e.key == "tokenizer.ggml.scores") {
      std::vector<uint8_t> bytes(e.value.array_data, e.value.array_data + e.value.array_size * 4);  // f32 / i32
      for (size_t k = 0; k < n_new; ++k) {
        uint8_t b[4] = {0, 0, 0, 0};
        if (e.key == "tokenizer.ggml.token_type") b[0] = 3;  // CONTROL (int32 3)
        bytes.insert(bytes.end(), b, b + 4);
      }
      w.add_array(e.key, e.value.array_type, e.value.array_size + n_new, bytes);
      return true;
    }
    return e.key == "tokenizer.chat_template";
  };
  r.tensor = [&](const gguf::TensorInfo& t, gguf::Writer& w) {
    if (t.name != "token_embd.weight" && t.name != "output.weight") return false;
    EXPECT_EQ(t.type, TensorType::F32);
    std::vector<uint8_t> bytes = tensor_bytes(t);
    bytes.resize(bytes.size() + n_new * static_cast<size_t>(t.ne[0]) * sizeof(float), 0);
    w.add_tensor(t.name, t.type, {t.ne[0], t.ne[1] + static_cast<int64_t>(n_new)}, bytes);
    return true;
  };
  const std::string tmpl = file_text(std::string(UBATCH_TESTS_DIR) + "/data/harmony.jinja");
  r.extra = [&](gguf::Writer& w) { w.add_string("tokenizer.chat_template", tmpl); };
  const std::vector<uint8_t> bytes = rewrite(*f.value(), r);
  const std::string out = (std::filesystem::temp_directory_path() /
                           ("ubatch-harmony-" + std::to_string(::getpid()) + ".gguf")).string();
  std::ofstream(out, std::ios::binary).write(reinterpret_cast<const char*>(bytes.data()),
                                              static_cast<std::streamsize>(bytes.size()));
  return out;
}

class ServerHarmony : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!std::filesystem::exists(reference_path("moe/models/tiny-gptoss-f32.gguf"))) return;
    path_ = new std::string(harmony_model());
    ServeOptions o;
    o.engine.n_parallel = 4;
    o.n_ctx = 4096;
    served_ = serve_model(*path_, o).release();
  }
  static void TearDownTestSuite() {
    delete served_;
    served_ = nullptr;
    if (path_) std::filesystem::remove(*path_);
    delete path_;
    path_ = nullptr;
  }
  void SetUp() override {
    if (!path_)
      GTEST_SKIP() << "no tiny gpt-oss at " << reference_path("moe/models/tiny-gptoss-f32.gguf")
                   << " (the reference data in ../shared)";
    ASSERT_TRUE(served_);
  }
  int port() const { return served_->port; }
  static inline std::string* path_ = nullptr;
  static inline ServedModel* served_ = nullptr;
};

json ask(int seed, int max_tokens = 32) {
  return json{{"messages", json::array({{{"role", "user"}, {"content", "What is the weather in Paris?"}}})},
              {"max_tokens", max_tokens},
              {"temperature", 1.0},
              {"seed", seed}};
}

TEST_F(ServerHarmony, TemplateIsDetectedAndEndIsNotEndOfGeneration) {
  const Tokenizer& tok = *served_->tokenizer;
  for (const char* m : kMarkers) {
    const std::vector<int32_t> ids = tok.tokenize(m, false, true);
    ASSERT_EQ(ids.size(), 1u) << m << " is one control token";
    EXPECT_EQ(tok.is_eog(ids[0]), std::string(m) == "<|return|>" || std::string(m) == "<|call|>") << m;
  }
}

TEST_F(ServerHarmony, ReasoningEffortReachesTheTemplate) {
  auto prompt_of = [&](json body) {
    Reply r = post(port(), "/apply-template", body.dump());
    EXPECT_EQ(r.status, 200) << r.body;
    return r.status == 200 ? r.parsed()["prompt"].get<std::string>() : std::string();
  };
  json body = ask(1);
  EXPECT_NE(prompt_of(body).find("Reasoning: medium"), std::string::npos);  // the template's default
  body["reasoning_effort"] = "high";
  const std::string high = prompt_of(body);
  EXPECT_NE(high.find("Reasoning: high"), std::string::npos) << high;
  EXPECT_EQ(high.substr(high.size() - std::string("<|start|>assistant").size()), "<|start|>assistant");
  json kw = ask(1);
  kw["chat_template_kwargs"] = {{"reasoning_effort", "low"}};
  EXPECT_NE(prompt_of(kw).find("Reasoning: low"), std::string::npos);
  kw["reasoning_effort"] = "high";  // the top-level field wins
  EXPECT_NE(prompt_of(kw).find("Reasoning: high"), std::string::npos);
  // The same prompt is what the model reads: its token count as usage says.
  Reply r = post(port(), "/v1/chat/completions", body.dump());
  ASSERT_EQ(r.status, 200) << r.body;
  const double n_prompt = static_cast<double>(served_->tokenizer->tokenize(high, false, true).size());
  EXPECT_NEAR(r.parsed()["usage"]["prompt_tokens"].get<double>(), n_prompt, 1.0);  // a BOS or not
  for (json bad : {json("extreme"), json(3), json("HIGH")}) {
    json b = ask(1);
    b["reasoning_effort"] = bad;
    Reply e = post(port(), "/v1/chat/completions", b.dump());
    EXPECT_EQ(e.status, 400) << bad.dump();
    EXPECT_EQ(e.parsed()["error"]["param"], "reasoning_effort") << e.body;
  }
}

// An assistant turn's reasoning_content comes back to a harmony template as `thinking` (what
// gpt-oss's template renders on the analysis channel before the turn's tool calls).
TEST_F(ServerHarmony, HistoryReasoningIsRenderedAsThinking) {
  const json tools = json::array({{{"type", "function"}, {"function", {{"name", "get_time"}}}}});
  json body = {{"tools", tools},
               {"messages",
                json::array({{{"role", "user"}, {"content", "Time?"}},
                             {{"role", "assistant"},
                              {"content", nullptr},
                              {"reasoning_content", "The user wants the time."},
                              {"tool_calls", json::array({{{"id", "call_1"},
                                                           {"type", "function"},
                                                           {"function", {{"name", "get_time"}, {"arguments", "{}"}}}}})}},
                             {{"role", "tool"}, {"tool_call_id", "call_1"}, {"content", "12:00"}}})}};
  Reply r = post(port(), "/apply-template", body.dump());
  ASSERT_EQ(r.status, 200) << r.body;
  const std::string prompt = r.parsed()["prompt"];
  EXPECT_NE(prompt.find("<|start|>assistant<|channel|>analysis<|message|>The user wants the time.<|end|>"
                        "<|start|>assistant<|channel|>commentary to=functions.get_time <|constrain|>json<|message|>{}"
                        "<|call|>"),
            std::string::npos)
      << prompt;
  EXPECT_EQ(r.parsed()["tool_format"], "harmony");  // calls are read from the reply's channels
}

// `part` without its newlines is a subsequence of `whole` without its newlines (harmony joins
// messages with "\n" and leaves headers and markers out; reasoning_format none leaves out only
// the control tokens).
bool drawn_from(const std::string& part, const std::string& whole) {
  size_t j = 0;
  for (char c : part) {
    if (c == '\n') continue;
    while (j < whole.size() && whole[j] != c) ++j;
    if (j == whole.size()) return false;
    ++j;
  }
  return true;
}

// Sampled replies; with `bias`, the markers' logits are raised so that random replies are full
// of headers, channels and messages in every order; with `open`, the generation prompt opens
// that channel (the template's test variable open_channel) and the reply is read from there.
void check_channels(int port, bool bias, const Tokenizer& tok, const std::string& open = "") {
  json logit_bias = json::object();
  if (bias)
    for (const char* m : {"<|channel|>", "<|message|>", "<|end|>", "<|start|>"})
      logit_bias[std::to_string(tok.tokenize(m, false, true)[0])] = 4;
  auto ask_biased = [&](int seed) {
    json b = ask(seed, 48);
    if (bias) b["logit_bias"] = logit_bias;
    if (!open.empty()) b["chat_template_kwargs"] = {{"open_channel", open}};
    return b;
  };
  int with_reasoning = 0, read_apart = 0;
  for (int seed = 1; seed <= 12; ++seed) {
    Reply r = post(port, "/v1/chat/completions", ask_biased(seed).dump());
    ASSERT_EQ(r.status, 200) << r.body;
    const json msg = r.parsed()["choices"][0]["message"];
    ASSERT_TRUE(msg["content"].is_string()) << msg.dump();
    // reasoning_format none: the same reply as today's text, control tokens left out.
    json none = ask_biased(seed);
    none["reasoning_format"] = "none";
    Reply n = post(port, "/v1/chat/completions", none.dump());
    ASSERT_EQ(n.status, 200);
    const json raw_msg = n.parsed()["choices"][0]["message"];
    EXPECT_FALSE(raw_msg.contains("reasoning_content"));
    const std::string raw = raw_msg["content"];
    EXPECT_TRUE(drawn_from(msg["content"], raw)) << "seed " << seed << ": " << msg.dump() << " vs " << raw;
    std::string reasoning_whole;
    if (msg.contains("reasoning_content")) {
      ++with_reasoning;
      reasoning_whole = msg["reasoning_content"];
      EXPECT_TRUE(drawn_from(reasoning_whole, raw)) << "seed " << seed;
    }
    if (msg["content"] != raw) ++read_apart;  // headers or messages were read
    // Streamed: the same pieces.
    json s = ask_biased(seed);
    s["stream"] = true;
    StreamResult st = post_stream(port, "/v1/chat/completions", s);
    ASSERT_EQ(st.status, 200);
    EXPECT_TRUE(st.done);
    std::string reasoning;
    for (const json& chunk : st.chunks)
      for (const json& c : chunk.value("choices", json::array()))
        if (c.contains("delta") && c["delta"].contains("reasoning_content"))
          reasoning += c["delta"]["reasoning_content"].get<std::string>();
    EXPECT_EQ(st.text[0], msg["content"]) << "seed " << seed;
    EXPECT_EQ(reasoning, reasoning_whole) << "seed " << seed;
    EXPECT_EQ(st.finish[0], r.parsed()["choices"][0]["finish_reason"]) << "seed " << seed;
  }
  std::printf("[ harmony ] of 12 sampled replies%s%s, %d read as harmony messages, %d with an analysis channel\n",
              bias ? " (markers favoured)" : "", open.empty() ? "" : (", the prompt opening " + open).c_str(), read_apart,
              with_reasoning);
  if (bias) {
    EXPECT_GT(read_apart, 0);
  }
  if (open == "analysis") {
    EXPECT_EQ(with_reasoning, 12);
  }
}

TEST_F(ServerHarmony, ChannelsSeparatedStreamedAndAsTheRawReply) {
  check_channels(port(), false, *served_->tokenizer);
  check_channels(port(), true, *served_->tokenizer);
  check_channels(port(), false, *served_->tokenizer, "analysis");
  check_channels(port(), true, *served_->tokenizer, "analysis");
}

// reasoning_budget_tokens on a harmony reply: the prompt opens the analysis channel, and after
// `budget` tokens the engine writes "<|end|><|start|>assistant<|channel|>final<|message|>" (in
// the reply's text only "assistant" and "final" show: control tokens have none) and the answer
// follows.
TEST_F(ServerHarmony, ThinkingBudgetClosesTheAnalysis) {
  // The forced close's text (its control tokens have none; "assistant" and "final" as this
  // vocabulary writes them).
  std::string close_text;
  for (int32_t id : served_->tokenizer->tokenize(chat::kHarmonyFinalOpen, false, true))
    close_text += served_->tokenizer->token_to_piece(id);
  ASSERT_NE(close_text.find("final"), std::string::npos) << close_text;
  int forced = 0;
  for (int budget : {0, 4}) {
    for (int seed = 1; seed <= 6; ++seed) {
      json b = ask(seed, 24);
      b["reasoning_budget_tokens"] = budget;
      b["logprobs"] = true;
      Reply r = post(port(), "/v1/chat/completions", b.dump());
      ASSERT_EQ(r.status, 200) << r.body;
      const json choice = r.parsed()["choices"][0];
      const json msg = choice["message"];
      ASSERT_TRUE(msg.contains("reasoning_content")) << msg.dump();
      const std::string reasoning = msg["reasoning_content"], content = msg["content"];
      // The generated text, token by token (control tokens: no bytes).
      std::vector<std::string> pieces;
      std::string all;
      for (const json& e : choice["logprobs"]["content"]) {
        std::string p;
        for (const json& x : e["bytes"]) p += static_cast<char>(x.get<int>());
        pieces.push_back(p);
        all += p;
      }
      // (A random byte that begins a UTF-8 sequence the close then breaks is U+FFFD in the text,
      // itself in the bytes: compared up to it.)
      const size_t bad = reasoning.find("\xEF\xBF\xBD");
      ASSERT_EQ(all.compare(0, std::min(bad, reasoning.size()), reasoning.substr(0, bad)), 0)
          << "seed " << seed << ": " << msg.dump();
      size_t n = 0, covered = 0;  // tokens that wrote the reasoning
      while (bad == std::string::npos && covered < reasoning.size()) covered += pieces[n++].size();
      EXPECT_LE(n, static_cast<size_t>(budget)) << "seed " << seed;
      if (bad == std::string::npos && all.compare(reasoning.size(), close_text.size(), close_text) == 0) {
        ++forced;
        std::string text = content;  // U+FFFD where the raw bytes were not UTF-8: left out
        for (size_t k; (k = text.find("\xEF\xBF\xBD")) != std::string::npos;) text.erase(k, 3);
        EXPECT_TRUE(drawn_from(text, all.substr(reasoning.size() + close_text.size()))) << "seed " << seed;
      }
      // Streamed: the same reasoning and answer.
      b["stream"] = true;
      b.erase("logprobs");
      StreamResult st = post_stream(port(), "/v1/chat/completions", b);
      ASSERT_EQ(st.status, 200);
      std::string streamed_reasoning;
      for (const json& chunk : st.chunks)
        for (const json& c : chunk.value("choices", json::array()))
          if (c.contains("delta") && c["delta"].contains("reasoning_content"))
            streamed_reasoning += c["delta"]["reasoning_content"].get<std::string>();
      EXPECT_EQ(streamed_reasoning, reasoning) << "seed " << seed;
      EXPECT_EQ(st.text[0], content) << "seed " << seed;
    }
  }
  std::printf("[ harmony ] budgets 0 and 4, 12 replies: %d closed by the engine\n", forced);
  EXPECT_GE(forced, 6);  // budget 0 always is
  // The prompt shows the opened channel (what the budget counts from).
  json b = ask(1);
  b["reasoning_budget_tokens"] = 4;
  Reply t = post(port(), "/apply-template", b.dump());
  ASSERT_EQ(t.status, 200);
  const std::string prompt = t.parsed()["prompt"];
  EXPECT_EQ(prompt.substr(prompt.size() - 48), "<|start|>assistant<|channel|>analysis<|message|>") << prompt;
}

TEST_F(ServerHarmony, NamedToolChoiceGivesASchemaValidCall) {
  const json tools = json::array(
      {{{"type", "function"},
        {"function",
         {{"name", "get_weather"},
          {"parameters",
           {{"type", "object"},
            {"properties", {{"unit", {{"type", "string"}, {"enum", {"celsius", "fahrenheit"}}}}}},
            {"required", {"unit"}},
            {"additionalProperties", false}}}}}},
       {{"type", "function"}, {"function", {{"name", "get_time"}, {"parameters", {{"type", "object"}}}}}}});
  for (bool stream : {false, true}) {
    for (int seed = 1; seed <= 4; ++seed) {
      json b = ask(seed, 64);
      b["tools"] = tools;
      b["tool_choice"] = {{"type", "function"}, {"function", {{"name", "get_weather"}}}};
      json calls;
      std::string finish;
      if (!stream) {
        Reply r = post(port(), "/v1/chat/completions", b.dump());
        ASSERT_EQ(r.status, 200) << r.body;
        const json choice = r.parsed()["choices"][0];
        calls = choice["message"].value("tool_calls", json::array());
        finish = choice["finish_reason"];
        EXPECT_TRUE(choice["message"]["content"].is_null()) << choice.dump();
      } else {
        b["stream"] = true;
        StreamResult st = post_stream(port(), "/v1/chat/completions", b);
        ASSERT_EQ(st.status, 200);
        calls = json::array();
        for (const json& chunk : st.chunks)
          for (const json& c : chunk.value("choices", json::array()))
            if (c.contains("delta") && c["delta"].contains("tool_calls"))
              for (const json& call : c["delta"]["tool_calls"]) calls.push_back(call);
        finish = st.finish[0];
        EXPECT_EQ(st.text[0], "");
      }
      ASSERT_EQ(calls.size(), 1u) << "seed " << seed << " stream " << stream;
      EXPECT_EQ(finish, "tool_calls");
      EXPECT_EQ(calls[0]["function"]["name"], "get_weather");
      const json args = json::parse(calls[0]["function"]["arguments"].get<std::string>(), nullptr, false);
      ASSERT_TRUE(args.is_object()) << calls[0].dump();
      EXPECT_TRUE(args["unit"] == "celsius" || args["unit"] == "fahrenheit") << args.dump();
    }
  }
}

}  // namespace server_harmony
}  // namespace ubatch::test
