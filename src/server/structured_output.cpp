#include "server/structured_output.h"

#include <fmt/format.h>

#include "grammar/grammar_cache.h"
#include "server/json_request.h"

namespace ubatch::server {

namespace {

using ojson = nlohmann::ordered_json;

const ojson* field(const ojson& obj, const char* key) {
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return nullptr;
  return &*it;
}

struct Constraint {
  grammar::GrammarKind kind = grammar::GrammarKind::Gbnf;
  std::string text;
  const char* param = "";  // the field it came from
};

}  // namespace

std::optional<ApiError> parse_structured_output(std::string_view body, grammar::GrammarCache& grammars,
                                                ParsedRequest& out) {
  ojson doc;  // only the members read here (a large logit_bias is not built again)
  static constexpr std::string_view kMembers[] = {"response_format", "grammar", "json_schema"};
  if (auto e = parse_ordered_members(body, kMembers, doc)) return e;
  std::vector<Constraint> found;
  if (const ojson* rf = field(doc, "response_format")) {
    if (!rf->is_object()) return invalid_request("'response_format' must be an object", "response_format", "invalid_type");
    const ojson* type = field(*rf, "type");
    if (!type || !type->is_string())
      return invalid_request("'response_format.type' must be \"text\", \"json_object\" or \"json_schema\"",
                             "response_format", "invalid_type");
    const std::string t = type->get<std::string>();
    if (t == "json_object") {
      // llama.cpp's extension: {"type": "json_object", "schema": {...}} constrains to the schema.
      if (const ojson* schema = field(*rf, "schema"))
        found.push_back({grammar::GrammarKind::JsonSchema, schema->dump(), "response_format"});
      else
        found.push_back({grammar::GrammarKind::JsonObject, "", "response_format"});
    } else if (t == "json_schema") {
      const ojson* js = field(*rf, "json_schema");
      if (!js || !js->is_object())
        return invalid_request("'response_format.json_schema' must be an object {\"name\", \"schema\", \"strict\"}",
                               "response_format", "invalid_type");
      if (const ojson* name = field(*js, "name"); name && !name->is_string())
        return invalid_request("'response_format.json_schema.name' must be a string", "response_format", "invalid_type");
      if (const ojson* strict = field(*js, "strict"); strict && !strict->is_boolean())
        return invalid_request("'response_format.json_schema.strict' must be a boolean", "response_format",
                               "invalid_type");
      const ojson* schema = field(*js, "schema");
      if (schema && !schema->is_object() && !schema->is_boolean())
        return invalid_request("'response_format.json_schema.schema' must be a JSON Schema object", "response_format",
                               "invalid_type");
      // No schema: any JSON value (OpenAI's field is optional).
      found.push_back({grammar::GrammarKind::JsonSchema, schema ? schema->dump() : "{}", "response_format"});
    } else if (t != "text") {
      return invalid_request(fmt::format("'response_format.type' must be \"text\", \"json_object\" or \"json_schema\", "
                                         "got \"{}\"",
                                         t),
                             "response_format");
    }
  }
  if (const ojson* g = field(doc, "grammar")) {
    if (!g->is_string()) return invalid_request("'grammar' must be a string (GBNF)", "grammar", "invalid_type");
    found.push_back({grammar::GrammarKind::Gbnf, g->get<std::string>(), "grammar"});
  }
  if (const ojson* js = field(doc, "json_schema")) {
    if (!js->is_object() && !js->is_boolean())
      return invalid_request("'json_schema' must be a JSON Schema object", "json_schema", "invalid_type");
    found.push_back({grammar::GrammarKind::JsonSchema, js->dump(), "json_schema"});
  }
  if (found.empty()) return std::nullopt;
  if (found.size() > 1)
    return invalid_request(fmt::format("only one of 'response_format' (json_object, json_schema), 'grammar' and "
                                       "'json_schema' may be given; got '{}' and '{}'",
                                       found[0].param, found[1].param),
                           found[1].param);
  const Constraint& c = found[0];
  if (c.text.size() > kMaxConstraintBytes)
    return invalid_request(fmt::format("the {} is {} bytes; at most {} are allowed",
                                       c.kind == grammar::GrammarKind::Gbnf ? "grammar" : "JSON Schema", c.text.size(),
                                       kMaxConstraintBytes),
                           c.param);
  auto compiled = grammars.get(c.kind, c.text);
  if (!compiled) {
    const bool schema = c.kind == grammar::GrammarKind::JsonSchema;
    return invalid_request(compiled.message(), c.param, schema ? "invalid_json_schema" : "invalid_grammar");
  }
  out.request.grammar = compiled.value();
  return std::nullopt;
}

}  // namespace ubatch::server
