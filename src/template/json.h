// JSON in and out of the engine.
//  - from_json: nlohmann::ordered_json → Value (objects keep their key order; strings are
//    marked data, or literal when asked — the renderer marks nothing literal but bos/eos).
//    Integers beyond int64 become floats. Deeper than kMaxValueDepth is a kLimit error.
//  - to_json: Python's json.dumps(x, ensure_ascii, indent, separators, sort_keys) as
//    transformers' `tojson` filter calls it: key order kept unless sort_keys, separators
//    ", " and ": " (item separator "," when indenting), floats as repr (NaN, Infinity),
//    no HTML escaping, "/" not escaped, control characters as \uXXXX (lowercase hex) or
//    \n \r \t \b \f, non-ASCII kept unless ensure_ascii (then \uXXXX with surrogate pairs).
//    Not serializable (kRuntime, Python's "Object of type X is not JSON serializable"):
//    undefined, generators and dict views, namespaces and other objects.
#pragma once

#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "template/value.h"

namespace ubatch::jinja {

Value from_json(const nlohmann::ordered_json& j, bool literal = false);

struct JsonStyle {
  bool ensure_ascii = false;
  std::optional<std::string> indent;  // nullopt: one line; else the text of one level
  std::string item_separator = ", ";
  std::string key_separator = ": ";
  bool sort_keys = false;
};
std::string to_json(State& st, const Value& v, const JsonStyle& style);

}  // namespace ubatch::jinja
