// Structured output through the HTTP server on the tiny reference model: response_format
// (text, json_object, json_schema), the `grammar` and `json_schema` extensions, with n,
// streaming, stop strings and logprobs; finish reasons (`stop` when the grammar completes,
// `length` mid-structure, the text never repaired); and the 400s for bad grammars and
// schemas. The model is random, so what is checked is what the grammar guarantees.
#include "test_server_fixture.h"

#include "grammar/grammar_cache.h"
#include "grammar/matcher.h"

namespace ubatch::test {
namespace {

class ServerStructured : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!std::filesystem::exists(tiny_model())) return;
    ServeOptions o;
    o.server.max_n = 8;
    o.server.http_threads = 16;
    o.engine.n_parallel = 4;
    o.engine.n_batch = 64;
    o.n_ctx = 1024;
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
  static grammar::GrammarCache& grammars() { return served_->engine->grammars(); }

  // The text is a complete sentence of the grammar (finish "stop") or a valid unfinished
  // prefix (finish "length").
  static void expect_conforms(grammar::GrammarKind kind, const std::string& source, const std::string& text,
                              const std::string& finish) {
    auto g = grammars().get(kind, source);
    ASSERT_TRUE(g.is_ok()) << g.message();
    grammar::Matcher m(g.value());
    ASSERT_TRUE(m.accept_bytes(text)) << "not a prefix of the grammar: '" << text << "'";
    if (finish == "stop") EXPECT_TRUE(m.can_end()) << "finished with stop but incomplete: '" << text << "'";
    else EXPECT_EQ(finish, "length") << text;
  }

  static ServedModel* served_;
};
ServedModel* ServerStructured::served_ = nullptr;

const char* kColorSchema = R"({"type": "object", "properties": {"color": {"enum": ["red", "green", "blue"]},
  "ok": {"type": "boolean"}, "n": {"type": "integer", "minimum": 0, "maximum": 9}}, "required": ["color", "ok", "n"],
  "additionalProperties": false})";

TEST_F(ServerStructured, JsonSchemaCompletesWithStopAndValidates) {
  for (const char* path : {"/v1/chat/completions", "/v1/completions"}) {
    // The schema goes in as written (an ordered object: color, ok, n).
    std::string body = R"({"max_tokens": 200, "temperature": 0, )";
    body += std::string(path) == "/v1/completions" ? R"("prompt": "A color:", )"
                                                  : R"("messages": [{"role": "user", "content": "Pick a color."}], )";
    body += R"("response_format": {"type": "json_schema", "json_schema": {"name": "c", "strict": true, "schema": )";
    body += std::string(kColorSchema) + "}}}";
    Reply r = post(port(), path, body);
    ASSERT_EQ(r.status, 200) << r.body;
    const json choice = r.parsed()["choices"][0];
    const std::string text = choice.contains("message") ? choice["message"]["content"].get<std::string>()
                                                        : choice["text"].get<std::string>();
    ASSERT_EQ(choice["finish_reason"], "stop") << text;
    const json out = json::parse(text, nullptr, false);
    ASSERT_FALSE(out.is_discarded()) << text;
    EXPECT_TRUE(out["color"] == "red" || out["color"] == "green" || out["color"] == "blue") << text;
    EXPECT_TRUE(out["ok"].is_boolean()) << text;
    EXPECT_TRUE(out["n"].is_number_integer() && out["n"] >= 0 && out["n"] <= 9) << text;
    // Properties come in the order the schema lists them.
    EXPECT_LT(text.find("\"color\""), text.find("\"ok\"")) << text;
    EXPECT_LT(text.find("\"ok\""), text.find("\"n\"")) << text;
  }
}

TEST_F(ServerStructured, EveryFormConstrainsTheOutput) {
  const std::string gbnf = "root ::= \"<\" [a-z]{1,6} (\",\" [0-9]{1,3}){0,3} \">\"\n";
  const std::string schema = R"({"type": "array", "items": {"type": "boolean"}, "maxItems": 4})";
  struct Form {
    json fields;
    grammar::GrammarKind kind;
    std::string source;
  };
  std::vector<Form> forms = {
      {{{"grammar", gbnf}}, grammar::GrammarKind::Gbnf, gbnf},
      {{{"json_schema", json::parse(schema)}}, grammar::GrammarKind::JsonSchema, json::parse(schema).dump()},
      {{{"response_format", {{"type", "json_object"}}}}, grammar::GrammarKind::JsonObject, ""},
      {{{"response_format", {{"type", "json_object"}, {"schema", json::parse(schema)}}}},  // llama.cpp's form
       grammar::GrammarKind::JsonSchema, json::parse(schema).dump()},
  };
  for (const Form& f : forms) {
    for (uint64_t seed : {1u, 2u, 3u}) {
      json body = {{"prompt", "x"}, {"max_tokens", 40}, {"temperature", 1.0}, {"top_k", 0}, {"seed", seed}};
      body.update(f.fields);
      Reply r = post(port(), "/v1/completions", body.dump());
      ASSERT_EQ(r.status, 200) << r.body;
      const json c = r.parsed()["choices"][0];
      expect_conforms(f.kind, f.source, c["text"], c["finish_reason"]);
    }
  }
  // "text" is no constraint at all.
  Reply r = post(port(), "/v1/completions", R"({"prompt": "x", "max_tokens": 4, "response_format": {"type": "text"}})");
  EXPECT_EQ(r.status, 200) << r.body;
}

TEST_F(ServerStructured, StreamingNSamplesAndLogprobs) {
  const std::string gbnf = "root ::= [a-c]{2,5} \";\" [0-9]{1,2}\n";
  json body = {{"prompt", "x"}, {"max_tokens", 30}, {"temperature", 1.0}, {"top_k", 0}, {"seed", 5}, {"n", 3},
               {"grammar", gbnf}, {"logprobs", 2}};
  Reply whole = post(port(), "/v1/completions", body.dump());
  ASSERT_EQ(whole.status, 200) << whole.body;
  body["stream"] = true;
  StreamResult streamed = post_stream(port(), "/v1/completions", body);
  ASSERT_EQ(streamed.status, 200);
  ASSERT_TRUE(streamed.done);
  const json choices = whole.parsed()["choices"];
  ASSERT_EQ(choices.size(), 3u);
  for (const json& c : choices) {
    const int i = c["index"];
    EXPECT_EQ(c["finish_reason"], "stop");
    expect_conforms(grammar::GrammarKind::Gbnf, gbnf, c["text"], "stop");
    EXPECT_EQ(streamed.text[i], c["text"].get<std::string>()) << "choice " << i;
    EXPECT_EQ(streamed.finish[i], "stop");
    // Logprobs: one entry per token, tokens spelling the text; logprobs of the model's own
    // distribution (finite, <= 0).
    std::string spelled;
    for (const json& t : c["logprobs"]["tokens"]) spelled += t.get<std::string>();
    EXPECT_EQ(spelled, c["text"].get<std::string>());
    for (const json& lp : c["logprobs"]["token_logprobs"]) EXPECT_LE(lp.get<double>(), 0.0);
  }
}

TEST_F(ServerStructured, StopStringsStillApply) {
  // The client's stop string ends the text (finish "stop") even inside the structure.
  Reply r = post(port(), "/v1/completions",
                 R"({"prompt": "x", "max_tokens": 20, "grammar": "root ::= \"abc\" \"def\"", "stop": ["cd"]})");
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.parsed()["choices"][0]["text"], "ab");
  EXPECT_EQ(r.parsed()["choices"][0]["finish_reason"], "stop");
  // Without it, the grammar completes and nothing more is generated.
  r = post(port(), "/v1/completions", R"({"prompt": "x", "max_tokens": 20, "grammar": "root ::= \"abc\" \"def\""})");
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.parsed()["choices"][0]["text"], "abcdef");
  EXPECT_EQ(r.parsed()["choices"][0]["finish_reason"], "stop");
}

TEST_F(ServerStructured, LengthMidStructureIsNotRepaired) {
  Reply r = post(port(), "/v1/chat/completions",
                 R"({"messages": [{"role": "user", "content": "json"}], "max_tokens": 3, "seed": 1,
                     "response_format": {"type": "json_object"}})");
  ASSERT_EQ(r.status, 200) << r.body;
  const json c = r.parsed()["choices"][0];
  EXPECT_EQ(c["finish_reason"], "length");
  EXPECT_EQ(r.parsed()["usage"]["completion_tokens"], 3);
  const std::string text = c["message"]["content"];
  expect_conforms(grammar::GrammarKind::JsonObject, "", text, "length");
  EXPECT_TRUE(json::parse(text, nullptr, false).is_discarded()) << "3 tokens cannot make a complete object: " << text;
}

TEST_F(ServerStructured, BadGrammarsAndSchemasAre400sNamingTheFault) {
  auto error_of = [](const std::string& body) {
    Reply r = post(port(), "/v1/completions", body);
    EXPECT_EQ(r.status, 400) << r.body;
    return r.parsed()["error"];
  };
  json e = error_of(R"({"prompt": "x", "grammar": "root ::= \"a\" (b\nb ::= \"c\""})");
  EXPECT_EQ(e["code"], "invalid_grammar");
  EXPECT_EQ(e["param"], "grammar");
  EXPECT_EQ(e["message"], "grammar: line 2, column 3: expected ')' to close the '(' at line 1, column 14");
  e = error_of(R"({"prompt": "x", "response_format": {"type": "json_schema", "json_schema": {"name": "n",
                  "schema": {"type": "object", "properties": {"a": {"type": "string", "contentMediaType": "x"}}}}}})");
  EXPECT_EQ(e["code"], "invalid_json_schema");
  EXPECT_EQ(e["param"], "response_format");
  EXPECT_EQ(e["message"], "json_schema: at #/properties/a: unsupported keyword 'contentMediaType'");
  e = error_of(R"({"prompt": "x", "json_schema": {"type": "integer", "multipleOf": 3}})");
  EXPECT_EQ(e["param"], "json_schema");
  EXPECT_EQ(e["message"], "json_schema: at #: unsupported keyword 'multipleOf'");
  e = error_of(R"({"prompt": "x", "response_format": {"type": "xml"}})");
  EXPECT_EQ(e["message"], "'response_format.type' must be \"text\", \"json_object\" or \"json_schema\", got \"xml\"");
  e = error_of(R"({"prompt": "x", "response_format": {"type": "json_schema"}})");
  EXPECT_EQ(e["param"], "response_format");
  e = error_of(R"({"prompt": "x", "response_format": {"type": "json_object"}, "grammar": "root ::= \"a\""})");
  EXPECT_EQ(e["param"], "grammar");
  e = error_of(R"({"prompt": "x", "grammar": 5})");
  EXPECT_EQ(e["code"], "invalid_type");
  e = error_of(R"({"prompt": "x", "grammar": "root ::= root \"a\" | \"b\""})");
  EXPECT_EQ(e["message"], "grammar: left recursion: the rule 'root' can reach itself without consuming input ('root' → 'root')");
  // The server is fine afterwards.
  EXPECT_EQ(get(port(), "/health").status, 200);
}

TEST_F(ServerStructured, RepeatedSchemasAreCompiledOnce) {
  const grammar::GrammarCacheCounters before = grammars().counters();
  const std::string body = R"({"prompt": "x", "max_tokens": 2, "json_schema": {"type": "object", "properties":
                              {"unique_field_for_this_test": {"type": "null"}}}})";
  for (int i = 0; i < 3; ++i) ASSERT_EQ(post(port(), "/v1/completions", body).status, 200);
  const grammar::GrammarCacheCounters after = grammars().counters();
  EXPECT_EQ(after.compiled, before.compiled + 1);
  EXPECT_GE(after.hits, before.hits + 2);
}

}  // namespace
}  // namespace ubatch::test
