#include "template/template.h"

#include <new>

#include "template/ast.h"
#include "template/evaluator.h"
#include "template/functions.h"
#include "template/parser.h"
#include "template/scope.h"

namespace ubatch::jinja {

TemplateResult<Template> Template::parse(std::string_view source, const LexerOptions& options) {
  if (source.size() > kMaxSourceBytes)
    return TemplateError{ErrorKind::kSyntax,
                         "template of " + std::to_string(source.size()) + " bytes exceeds the limit of " +
                             std::to_string(kMaxSourceBytes) + " bytes",
                         {}};
  try {
    auto program = std::make_shared<ast::Program>(jinja::parse(tokenize(source, options)));
    return Template(std::move(program));
  } catch (const TemplateException& e) {
    return e.error();
  } catch (const std::bad_alloc&) {
    return TemplateError{ErrorKind::kLimit, "out of memory while parsing the template", {}};
  }
}

TemplateResult<MarkedText> Template::render(const std::vector<std::pair<std::string, Value>>& variables,
                                            const RenderOptions& options, RenderStats* stats) const {
  State st(options.limits, options.now);
  auto root = std::make_shared<Scope>(nullptr);
  struct ClearRoot {
    std::shared_ptr<Scope>& root;
    ~ClearRoot() { root->clear(); }
  } clear_root{root};
  try {
    for (const auto& [name, value] : global_functions()) root->set(name, value);
    for (const auto& [name, value] : variables) root->set(name, value);
    Evaluator ev(st);
    MarkedText out = ev.run(*program_, root);
    if (stats) stats->fuel_used = st.fuel_used();
    return out;
  } catch (TemplateException& e) {
    if (e.error().pos.line == 0) e.error().pos = st.pos;
    if (stats) stats->fuel_used = st.fuel_used();
    return std::move(e.error());
  } catch (const std::bad_alloc&) {
    return TemplateError{ErrorKind::kLimit, "out of memory while rendering the template", st.pos};
  } catch (const std::exception& e) {
    return TemplateError{ErrorKind::kRuntime, std::string("internal error: ") + e.what(), st.pos};
  }
}

bool Template::reads_variable(std::string_view name) const { return reads_name(program_->body, name); }

}  // namespace ubatch::jinja
