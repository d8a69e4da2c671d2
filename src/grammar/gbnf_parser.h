// GBNF (the GGML BNF dialect of llama.cpp's `grammars/README.md`) → Grammar.
//
// Syntax accepted (docs/STRUCTURED.md has the full description with examples):
//   rule      ::= name "::=" alternatives          one rule per line; `root` is the start
//   name      : [a-zA-Z0-9_-]+
//   alternatives: sequence ("|" sequence)*         newlines may follow "|" and may precede a
//                                                   "|" that continues the rule; inside
//                                                   parentheses newlines are free
//   sequence  : element postfix*, elements separated by spaces
//   element   : "literal" | [class] | [^class] | . | name | ( alternatives )
//   postfix   : * | + | ? | {m} | {m,} | {m,n} | {,n}
//   escapes in literals and classes: \n \r \t \\ \" \' \[ \] \- \/ \xHH \uHHHH \UHHHHHHHH
//   comments  : # to the end of the line
// `.` is any code point; a class `[^...]` is every code point not listed. The text must be
// UTF-8; literals and classes hold code points, not bytes.
//
// Errors name the line and column (1-based, columns in bytes) and what was expected, e.g.
// "line 2, column 14: expected '::=' after the rule name 'value'"; an undefined rule is
// reported at its first reference. Rules defined twice, repetition counts above 10000,
// parentheses nested deeper than 200 and more than 32 operators on one element are errors
// too.
#pragma once

#include <string_view>

#include "common/status.h"
#include "grammar/grammar.h"

namespace ubatch::grammar {

// Parses GBNF text; the start rule is `root_name`. Thread-safe (no shared state).
Result<Grammar> parse_gbnf(std::string_view text, std::string_view root_name = "root");

}  // namespace ubatch::grammar
