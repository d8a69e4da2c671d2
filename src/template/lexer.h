// Lexer: template source → tokens, with jinja2's whitespace rules as Hugging Face configures
// them (trim_blocks, lstrip_blocks, keep_trailing_newline=False).
//
// Source handling (jinja2 3.1 lexer.py semantics):
//  - line breaks "\r\n" and "\r" become "\n"; one trailing "\n" of the source is dropped;
//  - "{{ … }}", "{% … %}", "{# … #}" delimit expressions, statements and comments; the text
//    between them is data;
//  - a "-" after an opening delimiter strips all whitespace (Python str.isspace) before it,
//    before a closing one all whitespace after it;
//  - trim_blocks: the first "\n" after a "%}" or "#}" is removed ("+%}" keeps it);
//  - lstrip_blocks: spaces and tabs from the start of a line up to a "{%" or "{#" are removed
//    when nothing else precedes the tag on that line ("{%+" keeps them);
//  - a tag ends only when brackets opened inside it are closed, so "{{ {'a': {'b': 1}} }}"
//    works; string literals may contain delimiters;
//  - "{% raw %}…{% endraw %}" is data, with the same whitespace rules on both tags.
// Token positions are the line and column (code points) of the token's first character.
// Errors (kSyntax, with position): invalid UTF-8, an unterminated tag, comment, string or raw
// block, an unexpected character or bracket.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "template/error.h"

namespace ubatch::jinja {

enum class TokenKind : uint8_t {
  kData,        // template text (text)
  kVarBegin,    // {{
  kVarEnd,      // }}
  kBlockBegin,  // {%
  kBlockEnd,    // %}
  kName,        // identifier or keyword (text)
  kString,      // string literal, escapes decoded (text)
  kInt,         // integer literal (int_value)
  kFloat,       // float literal (float_value)
  kOperator,    // operator or punctuation (text)
  kEof,
};

struct Token {
  TokenKind kind = TokenKind::kEof;
  std::string text;
  int64_t int_value = 0;
  double float_value = 0;
  SourcePos pos;
};

struct LexerOptions {
  bool trim_blocks = true;
  bool lstrip_blocks = true;
  bool keep_trailing_newline = false;
};

// The tokens of a template, ending with kEof; throws TemplateException (kSyntax).
std::vector<Token> tokenize(std::string_view source, const LexerOptions& options = {});

}  // namespace ubatch::jinja
