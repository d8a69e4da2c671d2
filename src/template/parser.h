// Parser: tokens → syntax tree, with jinja2 3.1's grammar (parser.py) for the statements
// chat templates use:
//   if/elif/else, for (tuple targets, `if` filter, else), set (expression, namespace attribute,
//   block with filters), macro (defaults, varargs/kwargs), filter blocks, break/continue
//   (the loopcontrols extension), with, and transformers' {% generation %} tag;
// and the whole expression language: literals (strings, numbers, true/false/none, lists,
// tuples, dicts), attribute/item/slice access, calls with keyword, *args and **kwargs,
// filters, tests (`is not`, one bare argument), arithmetic, `~`, chained comparisons,
// in/not in, and/or/not, inline if.
// Operator precedence (loosest first): inline if; or; and; not; comparisons; + -; ~;
// * / // %; **; unary - +; then postfix access, calls, filters and tests.
//
// Not supported (a kSyntax error naming the tag): include, import, from, extends, block,
// call, do, autoescape, trans, `for … recursive`; unknown tags are "Encountered unknown
// tag 'x'". Nesting deeper than kMaxParseDepth (brackets, operators, statements) is a
// syntax error, so that no template can exhaust the parser's or the evaluator's stack.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "template/ast.h"
#include "template/lexer.h"

namespace ubatch::jinja {

inline constexpr uint32_t kMaxParseDepth = 256;

// Throws TemplateException (kSyntax).
ast::Program parse(const std::vector<Token>& tokens);

// Whether `name` is read anywhere in the body (as a variable, not a string), macros included.
bool reads_name(const ast::Body& body, std::string_view name);

}  // namespace ubatch::jinja
