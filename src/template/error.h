// Errors of the Jinja engine (src/template/): what went wrong, where in the template, and of
// which kind — so that a caller can tell a template that refuses the input on purpose
// (`raise_exception`) from one that fails (a type error, an undefined value used) or does
// not parse, and from a render stopped by the sandbox.
//
// Inside the engine an error is thrown as TemplateException and caught at the API
// (Template::parse, Template::render, the chat renderer), which return TemplateResult.
#pragma once

#include <cstdint>
#include <exception>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

namespace ubatch::jinja {

// 1-based line and column (column in code points) in the template source after its line
// breaks are normalised to "\n"; 0 = unknown (e.g. an error before any node was reached).
struct SourcePos {
  uint32_t line = 0;
  uint32_t column = 0;
};

enum class ErrorKind : uint8_t {
  kSyntax,          // the template does not lex/parse (jinja2's TemplateSyntaxError)
  kRuntime,         // rendering failed: type error, undefined value used, unknown filter or
                    // test, refused attribute or mutation (jinja2's SecurityError), bad input
  kRaiseException,  // the template called raise_exception(msg); message() is msg verbatim
  kLimit,           // a sandbox limit stopped the render (fuel, output size, call depth, time)
};

const char* error_kind_name(ErrorKind kind);  // "syntax", "runtime", "raise_exception", "limit"

struct TemplateError {
  ErrorKind kind = ErrorKind::kRuntime;
  std::string message;  // what went wrong (for kRaiseException: the template's text, verbatim)
  SourcePos pos;

  // One line for logs and HTTP errors: "template syntax error at line 3, column 7: …";
  // raise_exception gives its message alone (the template's own words, as the reference does).
  std::string describe() const;
};

// A value or a TemplateError (never both).
template <typename T>
class TemplateResult {
 public:
  TemplateResult(T value) : value_(std::move(value)) {}                // NOLINT: implicit on purpose
  TemplateResult(TemplateError error) : error_(std::move(error)) {}  // NOLINT
  bool is_ok() const { return value_.has_value(); }
  explicit operator bool() const { return is_ok(); }
  const TemplateError& error() const { return error_; }
  T& value() & { return *value_; }
  const T& value() const& { return *value_; }
  T&& value() && { return std::move(*value_); }
  T* operator->() { return &*value_; }
  const T* operator->() const { return &*value_; }

 private:
  std::optional<T> value_;
  TemplateError error_;
};

// The engine's internal error transport.
class TemplateException : public std::exception {
 public:
  explicit TemplateException(TemplateError e) : error_(std::move(e)) {}
  const char* what() const noexcept override { return error_.message.c_str(); }
  TemplateError& error() { return error_; }
  const TemplateError& error() const { return error_; }

 private:
  TemplateError error_;
};

[[noreturn]] void throw_error(ErrorKind kind, std::string message, SourcePos pos = {});

// Joins pieces into one string (for messages; also sidesteps GCC 12's false -Wrestrict on
// `"literal" + std::string`).
inline std::string concat(std::initializer_list<std::string_view> parts) {
  size_t n = 0;
  for (std::string_view p : parts) n += p.size();
  std::string out;
  out.reserve(n);
  for (std::string_view p : parts) out.append(p);
  return out;
}
// Shorthands for the two kinds thrown most.
[[noreturn]] inline void runtime_error(std::string message) { throw_error(ErrorKind::kRuntime, std::move(message)); }
[[noreturn]] inline void syntax_error(std::string message, SourcePos pos) {
  throw_error(ErrorKind::kSyntax, std::move(message), pos);
}

}  // namespace ubatch::jinja
