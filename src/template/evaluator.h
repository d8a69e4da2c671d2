// Evaluator: walks a parsed template and writes its output, with jinja2's runtime semantics
// (scope.h for variables, value_ops.h for operators, filters/tests/methods/functions for the
// builtins) inside the State's sandbox budget.
//
// Output is MarkedText: the template's data and string literals are literal, everything
// else keeps the marks of the values it came from (marked_text.h). One Evaluator per render;
// not thread-safe (a Template may be rendered by several threads, each with its own).
#pragma once

#include <memory>
#include <string>

#include "template/ast.h"
#include "template/marked_text.h"
#include "template/scope.h"
#include "template/state.h"
#include "template/value.h"

namespace ubatch::jinja {

// A `{% macro %}`: callable; runs its body in a child of the scope it was defined in.
class MacroObject : public Object {
 public:
  MacroObject(const ast::Macro* node, std::shared_ptr<Scope> closure) : node_(node), closure_(std::move(closure)) {}
  std::string_view type_name() const override { return "Macro"; }
  std::string repr() const override { return "<Macro '" + node_->name + "'>"; }
  bool callable() const override { return true; }
  Value call(State& st, CallArgs& args) override;
  void release() override { closure_.reset(); }
  const ast::Macro& node() const { return *node_; }
  const std::shared_ptr<Scope>& closure() const { return closure_; }

 private:
  const ast::Macro* node_;
  std::shared_ptr<Scope> closure_;
};

class Evaluator {
 public:
  explicit Evaluator(State& st) : st_(st) { st_.evaluator = this; }
  ~Evaluator() { st_.evaluator = nullptr; }
  Evaluator(const Evaluator&) = delete;
  Evaluator& operator=(const Evaluator&) = delete;

  // Runs the template in `root`; throws TemplateException.
  MarkedText run(const ast::Program& program, const std::shared_ptr<Scope>& root);
  Value call_macro(const MacroObject& macro, CallArgs& args);

 private:
  enum class Flow { kNormal, kBreak, kContinue };

  Flow exec_body(const ast::Body& body, const std::shared_ptr<Scope>& scope);
  Flow exec(const ast::Node& node, const std::shared_ptr<Scope>& scope);
  Flow exec_if(const ast::If& node, const std::shared_ptr<Scope>& scope);
  Flow exec_for(const ast::For& node, const std::shared_ptr<Scope>& scope);
  void exec_set(const ast::Set& node, Scope& scope);
  void exec_set_block(const ast::SetBlock& node, const std::shared_ptr<Scope>& scope);
  void exec_filter_block(const ast::FilterBlock& node, const std::shared_ptr<Scope>& scope);
  void exec_with(const ast::With& node, const std::shared_ptr<Scope>& scope);
  // Runs `body` in a child scope with the output captured.
  MarkedText capture(const ast::Body& body, const std::shared_ptr<Scope>& parent);
  void assign(const ast::Target& target, Value value, Scope& scope);
  void emit(const MarkedText& text);

  Value eval(const ast::Node& node, Scope& scope);
  Value eval_call(const ast::Call& node, Scope& scope);
  Value eval_filter(const ast::Filter& node, Value input, Scope& scope);
  Value eval_test(const ast::Test& node, Scope& scope);
  Value eval_compare(const ast::Compare& node, Scope& scope);
  Value eval_concat(const ast::Concat& node, Scope& scope);
  Value eval_slice(const ast::Slice& node, Scope& scope);
  Value eval_sequence(const ast::Sequence& node, Scope& scope);
  Value eval_dict(const ast::DictLiteral& node, Scope& scope);
  CallArgs eval_args(const ast::Arguments& args, Scope& scope);
  // Counts a builtin's result against the allocation budget; returns it.
  Value account(Value v);
  // Applies filter nodes (input null) to a value in order.
  Value apply_filters(const std::vector<ast::NodePtr>& filters, Value value, Scope& scope);

  State& st_;
  MarkedText* out_ = nullptr;
};

}  // namespace ubatch::jinja
