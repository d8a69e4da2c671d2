// Writing GBNF text: literals and character classes with every byte that GBNF treats
// specially escaped, so generated grammars (json_schema.h, regex_gbnf.h) parse back exactly.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "grammar/grammar.h"

namespace ubatch::grammar {

// "..." matching exactly `text` (UTF-8; non-ASCII passes through, controls as \xHH).
std::string gbnf_literal(std::string_view text);
// [...] matching one code point of `ranges` (normalized, non-empty).
std::string gbnf_class(const std::vector<CharRange>& ranges);

}  // namespace ubatch::grammar
