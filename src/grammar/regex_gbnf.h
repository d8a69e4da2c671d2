// A JSON Schema `pattern` (ECMA-262 regular expression, the subset below) → a GBNF
// expression for the *content* of a JSON string whose decoded value the pattern matches.
//
// JSON Schema matches patterns anywhere in the string (RFC 8927-style search, not a full
// match): an alternative without a leading `^` may have any text before it, one without a
// trailing `$` any text after it (the `any_char` rule, one JSON string character).
// Characters the pattern allows are written as JSON requires: `"` and `\` escaped, control
// characters as \n, \t, \r, \b, \f or \u00XX.
//
// Supported: literals; `.` (any character but line terminators); classes `[...]`, `[^...]`
// with ranges; escapes \d \D \w \W \s \S (ASCII digits and word characters, the ECMAScript
// white space set), \n \r \t \f \v \0 \xHH \uHHHH \u{H...} \cX and escaped punctuation;
// groups `(...)`, `(?:...)`, `(?<name>...)`; alternation `|`; quantifiers `* + ? {n} {n,}
// {n,m}` (lazy forms `*?` etc. match the same strings); `^` at the start and `$` at the end of
// a top-level alternative. Not supported (an error naming it and its offset): lookaround,
// backreferences, word boundaries \b \B, anchors elsewhere, flags. Counts are limited to 1000.
// Generated strings are a subset of what Python's and ECMAScript's engines match.
#pragma once

#include <string>
#include <string_view>

#include "common/status.h"

namespace ubatch::grammar {

Result<std::string> regex_to_gbnf(std::string_view pattern, const std::string& any_char);

}  // namespace ubatch::grammar
