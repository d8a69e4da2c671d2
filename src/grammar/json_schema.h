// JSON Schema (the subset structured-output users send: OpenAI `response_format`
// json_schema, pydantic models) → GBNF text whose sentences are JSON texts valid under the
// schema.
//
// Supported (docs/STRUCTURED.md lists each with what it generates):
//   type (one or a list): object, array, string, number, integer, boolean, null
//   object: properties (generated in the order given), required, additionalProperties
//           (false or absent: no other property; true or a schema: further properties after
//           the listed ones, keys other than the listed ones)
//   array:  items (schema or false), prefixItems, minItems, maxItems (<= 1000)
//   string: minLength, maxLength, pattern (regex_gbnf.h), format (date, time, date-time, uuid,
//           email, ipv4)
//   number, integer: minimum, maximum, exclusiveMinimum, exclusiveMaximum (integer-valued
//           bounds for type number; any value for integer)
//   enum, const (any JSON values), anyOf, oneOf (as anyOf: overlapping branches are the
//   schema author's to avoid), allOf with one schema, $ref to "#" or a JSON pointer into the
//   document (e.g. #/$defs/Node; recursion allowed), $defs / definitions
//   annotations, ignored: $schema $id $anchor $comment title description default examples
//   deprecated readOnly writeOnly
//   true / {}: any JSON value
// Anything else is an error naming the keyword and where it is (a JSON pointer), e.g.
// "json_schema: at #/properties/tags: unsupported keyword 'uniqueItems'".
// Whitespace between tokens is limited to 20 characters at each place it may appear, numbers
// to 18 integer and 15 fraction digits (bounded numbers have no exponent), so a model cannot
// run on forever inside structure.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "common/status.h"

namespace ubatch::grammar {

// The GBNF grammar (start rule `root`) for the schema. Property order is the document's
// order, so pass an ordered_json parsed from the client's text.
Result<std::string> json_schema_to_gbnf(const nlohmann::ordered_json& schema);

// The GBNF grammar for any JSON object (response_format {"type": "json_object"}).
std::string json_object_gbnf();

}  // namespace ubatch::grammar
