// Template: a Jinja template parsed once and rendered any number of times — the engine's
// general API (the chat renderer, chat_template_renderer.h, is built on it).
//
// Environment: jinja2's ImmutableSandboxedEnvironment as Hugging Face transformers sets it
// up for chat templates (trim_blocks, lstrip_blocks, loopcontrols, the {% generation %} tag,
// transformers' tojson and globals; docs/CHAT.md lists what is supported). Rendering is a
// pure function of the template, the variables and options.now: no I/O, no clock other than
// that, no randomness.
//
// Errors: parse() gives kSyntax errors; render() kRuntime, kRaiseException or kLimit, each
// with the template line/column. Neither throws.
// Thread safety: a Template is immutable; render() may run on several threads at once.
#pragma once

#include <ctime>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "template/error.h"
#include "template/lexer.h"
#include "template/marked_text.h"
#include "template/state.h"
#include "template/value.h"

namespace ubatch::jinja {

namespace ast {
struct Program;
}

struct RenderOptions {
  RenderLimits limits;
  std::tm now{};  // what strftime_now formats (make_date in strftime.h builds one)
};

// What a render cost (for benchmarks and logs).
struct RenderStats {
  uint64_t fuel_used = 0;
};

class Template {
 public:
  // Parses `source` (any size up to kMaxSourceBytes; must be UTF-8).
  static constexpr size_t kMaxSourceBytes = 4u << 20;
  static TemplateResult<Template> parse(std::string_view source, const LexerOptions& options = {});

  // Renders with `variables` (name → value, later names win; the globals of functions.h are
  // underneath). The output keeps literal/data marks (marked_text.h).
  TemplateResult<MarkedText> render(const std::vector<std::pair<std::string, Value>>& variables,
                                    const RenderOptions& options, RenderStats* stats = nullptr) const;

  // Whether the template reads a variable called `name` anywhere (AST, macros included).
  bool reads_variable(std::string_view name) const;

 private:
  explicit Template(std::shared_ptr<const ast::Program> program) : program_(std::move(program)) {}
  std::shared_ptr<const ast::Program> program_;
};

}  // namespace ubatch::jinja
