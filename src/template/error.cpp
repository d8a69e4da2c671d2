#include "template/error.h"

namespace ubatch::jinja {

const char* error_kind_name(ErrorKind kind) {
  switch (kind) {
    case ErrorKind::kSyntax: return "syntax";
    case ErrorKind::kRuntime: return "runtime";
    case ErrorKind::kRaiseException: return "raise_exception";
    case ErrorKind::kLimit: return "limit";
  }
  return "runtime";
}

std::string TemplateError::describe() const {
  if (kind == ErrorKind::kRaiseException) return message;
  std::string out;
  switch (kind) {
    case ErrorKind::kSyntax: out.append("template syntax error"); break;
    case ErrorKind::kLimit: out.append("template limit reached"); break;
    default: out.append("template error"); break;
  }
  if (pos.line > 0) {
    out.append(" at line ").append(std::to_string(pos.line));
    out.append(", column ").append(std::to_string(pos.column));
  }
  out.append(": ").append(message);
  return out;
}

void throw_error(ErrorKind kind, std::string message, SourcePos pos) {
  throw TemplateException(TemplateError{kind, std::move(message), pos});
}

}  // namespace ubatch::jinja
