// GET /openapi.json (docs/openapi.yaml, embedded at build time) against the real server on
// the tiny reference model: the document parses, every $ref resolves, every documented
// operation is served and answers with one of its documented statuses, and the bodies of
// those answers (JSON and SSE chunks, errors included) conform to the documented schemas.
#include "test_server_fixture.h"

#include <set>

namespace ubatch::test {
namespace {

// A JSON Schema check of the OpenAPI 3.0 subset docs/openapi.yaml uses: $ref, nullable,
// allOf, oneOf, enum, type, required, properties, additionalProperties, items,
// minItems/maxItems, minimum/maximum. Records every violation with its JSON path.
class SchemaCheck {
 public:
  explicit SchemaCheck(const json& doc) : doc_(doc) {}

  const json* resolve(const std::string& ref) const {
    if (ref.rfind("#/", 0) != 0) return nullptr;
    const json* node = &doc_;
    size_t pos = 2;
    while (pos <= ref.size()) {
      size_t end = ref.find('/', pos);
      if (end == std::string::npos) end = ref.size();
      // JSON Pointer unescaping (RFC 6901): ~1 is '/', ~0 is '~'.
      std::string part;
      for (size_t i = pos; i < end; ++i) {
        if (ref[i] == '~' && i + 1 < end && (ref[i + 1] == '0' || ref[i + 1] == '1')) {
          part.push_back(ref[i + 1] == '1' ? '/' : '~');
          ++i;
        } else {
          part.push_back(ref[i]);
        }
      }
      if (!node->is_object() || !node->contains(part)) return nullptr;
      node = &(*node)[part];
      pos = end + 1;
    }
    return node;
  }

  std::vector<std::string> check(const json& schema, const json& value, const std::string& where) {
    errors_.clear();
    visit(schema, value, where);
    return errors_;
  }

 private:
  void fail(const std::string& where, const std::string& what) { errors_.push_back(where + ": " + what); }

  bool matches(const json& schema, const json& value) {
    std::vector<std::string> saved;
    saved.swap(errors_);
    visit(schema, value, "");
    const bool ok = errors_.empty();
    errors_.swap(saved);
    return ok;
  }

  // Property names a schema documents, through $ref and allOf.
  void documented_fields(const json& schema, std::set<std::string>& out) const {
    if (schema.contains("$ref")) {
      if (const json* target = resolve(schema["$ref"].get<std::string>())) documented_fields(*target, out);
      return;
    }
    const json props = schema.value("properties", json::object());
    for (auto it = props.begin(); it != props.end(); ++it) out.insert(it.key());
    for (const json& s : schema.value("allOf", json::array())) documented_fields(s, out);
  }

  // part_of_all: the schema is one member of an allOf (fields documented by the other
  // members are not "undocumented" here; the allOf checks them as a whole).
  void visit(const json& schema, const json& value, const std::string& where, bool part_of_all = false) {
    if (schema.contains("$ref")) {
      const json* target = resolve(schema["$ref"].get<std::string>());
      if (!target) return fail(where, "unresolved $ref " + schema["$ref"].dump());
      return visit(*target, value, where, part_of_all);
    }
    if (value.is_null() && schema.value("nullable", false)) return;
    if (schema.contains("allOf")) {
      for (const json& s : schema["allOf"]) visit(s, value, where, true);
      std::set<std::string> known;
      documented_fields(schema, known);
      if (value.is_object() && !known.empty() && !part_of_all)
        for (auto it = value.begin(); it != value.end(); ++it)
          if (!known.count(it.key())) fail(where, "undocumented field " + it.key());
    }
    if (schema.contains("oneOf")) {
      int n = 0;
      for (const json& s : schema["oneOf"]) n += matches(s, value) ? 1 : 0;
      if (n != 1) fail(where, "matches " + std::to_string(n) + " of oneOf (want 1): " + value.dump().substr(0, 200));
    }
    if (schema.contains("enum")) {
      bool found = false;
      for (const json& e : schema["enum"]) found = found || e == value;
      if (!found) fail(where, value.dump() + " not in enum " + schema["enum"].dump());
    }
    if (!schema.contains("type")) return;
    const std::string type = schema["type"];
    const bool type_ok = (type == "object" && value.is_object()) || (type == "array" && value.is_array()) ||
                         (type == "string" && value.is_string()) || (type == "boolean" && value.is_boolean()) ||
                         (type == "integer" && value.is_number_integer()) || (type == "number" && value.is_number());
    if (!type_ok) return fail(where, "expected " + type + ", got " + value.dump().substr(0, 200));
    if (value.is_number()) {
      const double x = value.get<double>();
      if (schema.contains("minimum")) {
        const double lo = schema["minimum"].get<double>();
        if (x < lo || (schema.value("exclusiveMinimum", false) && x == lo)) fail(where, value.dump() + " below minimum");
      }
      if (schema.contains("maximum") && x > schema["maximum"].get<double>()) fail(where, value.dump() + " above maximum");
    }
    if (value.is_array()) {
      if (schema.contains("minItems") && value.size() < schema["minItems"].get<size_t>()) fail(where, "too few items");
      if (schema.contains("maxItems") && value.size() > schema["maxItems"].get<size_t>()) fail(where, "too many items");
      if (schema.contains("items"))
        for (size_t i = 0; i < value.size(); ++i) visit(schema["items"], value[i], where + "[" + std::to_string(i) + "]");
    }
    if (value.is_object()) {
      for (const json& r : schema.value("required", json::array()))
        if (!value.contains(r.get<std::string>())) fail(where, "missing required " + r.get<std::string>());
      const json props = schema.value("properties", json::object());
      for (auto it = value.begin(); it != value.end(); ++it) {
        if (props.contains(it.key())) {
          visit(props[it.key()], it.value(), where + "." + it.key());
        } else if (schema.contains("additionalProperties") && schema["additionalProperties"].is_object()) {
          visit(schema["additionalProperties"], it.value(), where + "." + it.key());
        } else if (schema.contains("allOf") || part_of_all) {
          // checked against every member's properties together (above)
        } else if (!props.empty()) {
          fail(where, "undocumented field " + it.key());
        }
      }
    }
  }

  const json& doc_;
  std::vector<std::string> errors_;
};

class ServerOpenApi : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!std::filesystem::exists(tiny_model())) return;
    ServeOptions o;
    o.server.max_body = 16 * 1024;
    o.engine.n_parallel = 2;
    o.engine.n_batch = 64;
    o.n_ctx = 512;
    served_ = serve_model(tiny_model(), o).release();
    o.server.api_key = "sesame";
    keyed_ = serve_model(tiny_model(), o).release();
  }
  static void TearDownTestSuite() {
    delete served_;
    delete keyed_;
    served_ = keyed_ = nullptr;
  }
  void SetUp() override {
    UBATCH_REQUIRE_TINY_MODEL();
    ASSERT_NE(served_, nullptr);
    ASSERT_NE(keyed_, nullptr);
    Reply r = get(served_->port, "/openapi.json");
    ASSERT_EQ(r.status, 200) << r.body;
    EXPECT_NE(r.headers.find("Content-Type")->second.find("application/json"), std::string::npos);
    doc_ = r.parsed();
    ASSERT_FALSE(doc_.is_discarded()) << "GET /openapi.json is not JSON";
  }

  // Checks an answer of `method path` against the document: a documented status, and a body
  // that conforms to its schema (SSE: each chunk against `chunk_schema`).
  void expect_documented(const std::string& method, const std::string& path, const Reply& r,
                         const std::string& chunk_schema = "") {
    SCOPED_TRACE(method + " " + path + " → " + std::to_string(r.status));
    ASSERT_TRUE(doc_["paths"].contains(path)) << path << " is not documented";
    const json& op = doc_["paths"][path][method];
    ASSERT_TRUE(op.is_object()) << method << " " << path << " is not documented";
    const std::string status = std::to_string(r.status);
    ASSERT_TRUE(op["responses"].contains(status)) << "status " << status << " is not documented: " << r.body;
    SchemaCheck check(doc_);
    json response = op["responses"][status];
    if (response.contains("$ref")) response = *check.resolve(response["$ref"]);
    auto ct = r.headers.find("Content-Type");
    ASSERT_NE(ct, r.headers.end());
    const std::string mime = ct->second.substr(0, ct->second.find(';'));
    ASSERT_TRUE(response["content"].contains(mime)) << "content type " << mime << " is not documented";
    if (mime == "text/event-stream") {
      ASSERT_FALSE(chunk_schema.empty());
      const json schema = {{"$ref", "#/components/schemas/" + chunk_schema}};
      for (const std::string& payload : sse_payloads(r.body)) {
        if (payload == "[DONE]") continue;
        for (const std::string& e : check.check(schema, json::parse(payload), chunk_schema)) ADD_FAILURE() << e;
      }
      return;
    }
    if (mime != "application/json") return;
    for (const std::string& e : check.check(response["content"][mime]["schema"], r.parsed(), "body")) ADD_FAILURE() << e;
  }

  static ServedModel* served_;
  static ServedModel* keyed_;  // --api-key sesame
  json doc_;
};
ServedModel* ServerOpenApi::served_ = nullptr;
ServedModel* ServerOpenApi::keyed_ = nullptr;

TEST_F(ServerOpenApi, DocumentParsesAndEveryRefResolves) {
  EXPECT_EQ(doc_["openapi"], "3.0.3");
  ASSERT_TRUE(doc_["paths"].is_object());
  SchemaCheck check(doc_);
  std::function<void(const json&, const std::string&)> walk = [&](const json& node, const std::string& where) {
    if (node.is_object()) {
      if (node.contains("$ref")) {
        EXPECT_NE(check.resolve(node["$ref"]), nullptr) << where << ": " << node["$ref"];
      }
      for (auto it = node.begin(); it != node.end(); ++it) walk(it.value(), where + "/" + it.key());
    } else if (node.is_array()) {
      for (size_t i = 0; i < node.size(); ++i) walk(node[i], where + "/" + std::to_string(i));
    }
  };
  walk(doc_, "#");
  for (auto it = doc_["paths"].begin(); it != doc_["paths"].end(); ++it)
    for (auto op = it.value().begin(); op != it.value().end(); ++op) {
      EXPECT_TRUE(op.value().contains("operationId")) << op.key() << " " << it.key();
      EXPECT_FALSE(op.value()["responses"].empty()) << op.key() << " " << it.key();
    }
}

// GET of an endless event stream (the dashboard's): the status, headers and the body up to
// its `n`-th `event:` block, then the connection is closed.
Reply get_first_events(int port, const std::string& path, int n = 1) {
  std::string body;
  Reply r = get_stream(port, path, {}, [&](int status, std::string_view data) {
    body.append(data);
    int complete = 0;
    for (size_t at = body.find("event:"); at != std::string::npos; at = body.find("event:", at + 1))
      complete += body.find("\n\n", at) != std::string::npos;
    return status != 200 || complete < n;
  });
  r.body = std::move(body);
  return r;
}

// The `data:` of each `event: snapshot` block of a dashboard stream, parsed.
std::vector<json> snapshot_events(const std::string& body) {
  std::vector<json> out;
  for (size_t at = body.find("event: snapshot\ndata: "); at != std::string::npos;
       at = body.find("event: snapshot\ndata: ", at + 1)) {
    const size_t begin = at + std::string("event: snapshot\ndata: ").size();
    const size_t end = body.find("\n\n", begin);
    if (end == std::string::npos) break;
    out.push_back(json::parse(body.substr(begin, end - begin), nullptr, false));
  }
  return out;
}

// A documented path with its path parameters replaced by their documented examples.
std::string concrete_path(const std::string& path, const json& op) {
  std::string out = path;
  for (const json& p : op.value("parameters", json::array())) {
    if (p.value("in", "") != "path") continue;
    std::string name = "{";
    name += p["name"].get<std::string>();
    name += '}';
    const size_t at = out.find(name);
    if (at == std::string::npos) continue;
    std::string filled = out.substr(0, at);
    filled += p["example"].get<std::string>();
    filled += out.substr(at + name.size());
    out = filled;
  }
  return out;
}

bool is_event_stream(const json& op) {
  return op["responses"].contains("200") && op["responses"]["200"].contains("content") &&
         op["responses"]["200"]["content"].contains("text/event-stream") && !op.contains("requestBody");
}

// Every documented operation is served: a request to it never gets 404, and another method
// on the same path does not reach a handler (404 or 405).
TEST_F(ServerOpenApi, EveryDocumentedOperationIsServed) {
  std::set<std::pair<std::string, std::string>> ops;
  for (auto it = doc_["paths"].begin(); it != doc_["paths"].end(); ++it)
    for (auto op = it.value().begin(); op != it.value().end(); ++op) ops.insert({op.key(), it.key()});
  EXPECT_GE(ops.size(), 12u);
  for (const auto& [method, path] : ops) {
    SCOPED_TRACE(method + " " + path);
    ASSERT_TRUE(method == "get" || method == "post") << "the test knows GET and POST";
    const json& op = doc_["paths"][path][method];
    const std::string url = concrete_path(path, op);
    if (is_event_stream(op)) {  // endless: its first event, against the schema in its own test
      Reply r = get_first_events(served_->port, url);
      EXPECT_EQ(r.status, 200);
      EXPECT_EQ(snapshot_events(r.body).size(), 1u) << r.body.substr(0, 200);
      EXPECT_EQ(post(served_->port, url, "{}").status, 404);
      continue;
    }
    Reply r = method == "get" ? get(served_->port, url) : post(served_->port, url, "{}");
    // A model id the server does not serve (the example names the default chat model) is the
    // route's own 404, not a missing route.
    if (path.find("{model}") == std::string::npos || r.status != 404)
      EXPECT_NE(r.status, 404) << r.body;
    else
      EXPECT_NE(r.body.find("model_not_found"), std::string::npos) << r.body;
    EXPECT_NE(r.status, -1);
    expect_documented(method, path, r);
    Reply other = method == "get" ? post(served_->port, url, "{}") : get(served_->port, url);
    EXPECT_TRUE(other.status == 404 || other.status == 405) << "undocumented method answered " << other.status;
  }
  // Paths the document does not list are not served.
  for (const char* path : {"/v1", "/v1/rerank", "/props", "/slots", "/v1/completions/", "/openapi.yaml",
                           "/docs", "/v2/models"}) {
    EXPECT_EQ(get(served_->port, path).status, 404) << path;
    EXPECT_EQ(post(served_->port, path, "{}").status, 404) << path;
  }
}

TEST_F(ServerOpenApi, AnswersConformToTheDocumentedSchemas) {
  const int port = served_->port;
  const json chat = {{"messages", json::array({{{"role", "user"}, {"content", "hi"}}})}, {"max_tokens", 3}};
  const json completion = {{"prompt", "hello"}, {"max_tokens", 3}};
  for (const char* path : {"/v1/completions", "/completions"}) {
    expect_documented("post", path, post(port, path, completion.dump()));
    json with = completion;
    with["logprobs"] = 2;
    with["n"] = 2;
    expect_documented("post", path, post(port, path, with.dump()));
    with["stream"] = true;
    with["stream_options"] = {{"include_usage", true}};
    expect_documented("post", path, post(port, path, with.dump()), "CompletionChunk");
    expect_documented("post", path, post(port, path, R"({"prompt": 5})"));
    expect_documented("post", path, post(port, path, "not json"));
  }
  for (const char* path : {"/v1/chat/completions", "/chat/completions"}) {
    expect_documented("post", path, post(port, path, chat.dump()));
    json with = chat;
    with["logprobs"] = true;
    with["top_logprobs"] = 2;
    expect_documented("post", path, post(port, path, with.dump()));
    with["stream"] = true;
    with["stream_options"] = {{"include_usage", true}};
    expect_documented("post", path, post(port, path, with.dump()), "ChatCompletionChunk");
    expect_documented("post", path, post(port, path, R"({"messages": [{"role": "tool", "content": "x"}]})"));
  }
  // Tool calling: a constrained call (or, cut by max_tokens, text), streamed and not; the
  // prompt of /apply-template; a refused tool_choice.
  json tool_chat = chat;
  tool_chat["tools"] = json::parse(R"([{"type": "function", "function": {"name": "f", "parameters":
      {"type": "object", "properties": {"a": {"type": "integer", "minimum": 0, "maximum": 9}}, "required": ["a"]}}}])");
  tool_chat["tool_choice"] = "required";
  tool_chat["max_tokens"] = 40;
  Reply called = post(port, "/v1/chat/completions", tool_chat.dump());
  expect_documented("post", "/v1/chat/completions", called);
  EXPECT_EQ(called.status, 200) << called.body;
  expect_documented("post", "/apply-template", post(port, "/apply-template", tool_chat.dump()));
  tool_chat["stream"] = true;
  expect_documented("post", "/v1/chat/completions", post(port, "/v1/chat/completions", tool_chat.dump()),
                    "ChatCompletionChunk");
  tool_chat["tool_choice"] = {{"type", "function"}, {"function", {{"name", "g"}}}};
  expect_documented("post", "/apply-template", post(port, "/apply-template", tool_chat.dump()));
  for (const char* path : {"/v1/embeddings", "/embeddings"}) {
    expect_documented("post", path, post(port, path, R"({"input": ["hello", "world"]})"));
    expect_documented("post", path, post(port, path, R"({"input": [1, 2, 3], "encoding_format": "base64", "dimensions": 4})"));
    expect_documented("post", path, post(port, path, R"({"input": ""})"));
  }
  EXPECT_EQ(post(port, "/v1/embeddings", R"({"input": "hello"})").status, 200);
  for (const char* path : {"/v1/models", "/models", "/health", "/v1/health", "/metrics", "/openapi.json"})
    expect_documented("get", path, get(port, path));
  expect_documented("post", "/tokenize", post(port, "/tokenize", R"({"content": "hi", "add_special": true})"));
  expect_documented("post", "/tokenize", post(port, "/tokenize", R"({"content": "hi", "with_pieces": true})"));
  expect_documented("post", "/tokenize", post(port, "/tokenize", R"({"content": 1})"));
  expect_documented("post", "/detokenize", post(port, "/detokenize", R"({"tokens": [1, 2, 3]})"));
  expect_documented("post", "/detokenize", post(port, "/detokenize", R"({"tokens": [-1]})"));
  // 413: a body over --max-body.
  Reply big = post(port, "/v1/completions", json{{"prompt", std::string(32 * 1024, 'a')}}.dump());
  EXPECT_EQ(big.status, 413);
  expect_documented("post", "/v1/completions", big);
  // The statuses these checks stand on.
  EXPECT_EQ(post(port, "/v1/completions", completion.dump()).status, 200);
  EXPECT_EQ(post(port, "/v1/chat/completions", chat.dump()).status, 200);
  EXPECT_EQ(post(port, "/v1/completions", R"({"prompt": 5})").status, 400);
}

// The dashboard's event stream: each snapshot conforms to DashboardSnapshot, with steps and
// an active request in it; its errors are documented ones.
TEST_F(ServerOpenApi, DashboardEventsConformToTheDocumentedSchema) {
  const int port = served_->port;
  ASSERT_EQ(post(port, "/v1/completions", R"({"prompt": "hello", "max_tokens": 4})").status, 200);
  SchemaCheck check(doc_);
  const json schema = {{"$ref", "#/components/schemas/DashboardSnapshot"}};
  bool saw_request = false, saw_steps = false;
  std::vector<uint64_t> submitted;
  for (int attempt = 0; attempt < 50 && !(saw_request && saw_steps); ++attempt) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));  // (closed streams are counted out within 50 ms)
    // Work that outlasts two snapshots (two slots, four long requests), then two snapshots:
    // the first asks for the request table, the second shows it.
    for (int i = 0; i < 4; ++i) {
      sched::Request long_one;
      long_one.prompt_text = "a long one";
      long_one.max_tokens = 400;
      long_one.ignore_eos = true;
      long_one.deadline_ms = 600000;
      sched::Engine::Submitted sub = served_->engine->submit(long_one);
      ASSERT_TRUE(sub.ok()) << sub.error_message;
      submitted.push_back(sub.stream->id());
    }
    Reply r = get_first_events(port, "/v1/dashboard/events?interval_ms=100", 2);
    ASSERT_EQ(r.status, 200);
    EXPECT_EQ(r.headers.find("Content-Type")->second, "text/event-stream");
    for (const json& snap : snapshot_events(r.body)) {
      ASSERT_FALSE(snap.is_discarded());
      for (const std::string& e : check.check(schema, snap, "snapshot")) ADD_FAILURE() << e;
      saw_request = saw_request || !snap["requests"]["rows"].empty();
      saw_steps = saw_steps || !snap["steps"]["rows"].empty();
    }
  }
  for (uint64_t id : submitted) served_->engine->cancel(id);
  EXPECT_TRUE(saw_request && saw_steps);
  expect_documented("get", "/v1/dashboard/events", get(port, "/v1/dashboard/events?interval_ms=1"));
  expect_documented("get", "/v1/dashboard/events", get(keyed_->port, "/v1/dashboard/events"));
  // The page and its files need no key.
  EXPECT_EQ(get(keyed_->port, "/").status, 200);
  EXPECT_EQ(get(keyed_->port, "/webui/style.css").status, 200);
  expect_documented("get", "/webui/{file}", get(port, "/webui/nope.js"));
  expect_documented("get", "/", get(port, "/"));
}

// The checker itself finds what it must (so the conformance test can fail).
TEST_F(ServerOpenApi, SchemaCheckFindsViolations) {
  SchemaCheck check(doc_);
  const json response = {{"$ref", "#/components/schemas/CompletionResponse"}};
  EXPECT_FALSE(check.check(response, json::object(), "body").empty()) << "missing required fields";
  Reply ok = post(served_->port, "/v1/completions", R"({"prompt": "hello", "max_tokens": 2})");
  ASSERT_EQ(ok.status, 200);
  json body = ok.parsed();
  EXPECT_TRUE(check.check(response, body, "body").empty());
  json bad = body;
  bad["choices"][0]["finish_reason"] = "tired";
  EXPECT_FALSE(check.check(response, bad, "body").empty()) << "a value outside the enum";
  bad = body;
  bad["usage"]["prompt_tokens"] = -1;
  EXPECT_FALSE(check.check(response, bad, "body").empty()) << "below the minimum";
  bad = body;
  bad["surprise"] = 1;
  EXPECT_FALSE(check.check(response, bad, "body").empty()) << "an undocumented field";
  bad = body;
  bad["choices"][0]["logprobs"] = {{"tokens", json::array()}};
  EXPECT_FALSE(check.check(response, bad, "body").empty()) << "a nullable $ref with a wrong object";
}

TEST_F(ServerOpenApi, AuthenticationAsDocumented) {
  const int port = keyed_->port;
  for (const char* path : {"/v1/models", "/metrics", "/openapi.json"}) {
    Reply r = get(port, path);
    EXPECT_EQ(r.status, 401);
    expect_documented("get", path, r);
    EXPECT_EQ(get(port, path, {{"Authorization", "Bearer sesame"}}).status, 200);
    EXPECT_EQ(get(port, path, {{"X-Api-Key", "sesame"}}).status, 200);
  }
  expect_documented("post", "/v1/completions", post(port, "/v1/completions", R"({"prompt": "hi"})"));
  // /health needs no key (its operation says security: [{}]).
  expect_documented("get", "/health", get(port, "/health"));
  EXPECT_EQ(doc_["paths"]["/health"]["get"]["security"], json::array({json::object()}));
  EXPECT_TRUE(doc_["components"]["securitySchemes"].contains("bearerAuth"));
}

}  // namespace
}  // namespace ubatch::test
