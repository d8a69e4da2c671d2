// Tree-walking evaluator (evaluator.h).
#include "template/evaluator.h"

#include "template/error.h"
#include "template/objects.h"
#include "template/value_ops.h"

namespace ubatch::jinja {

namespace {

// One level of evaluation: position for errors, a step of fuel, the nesting bound.
class Enter {
 public:
  Enter(State& st, const ast::Node& node) : st_(st) {
    st.pos = node.pos;
    st.step();
    st.enter_eval();
  }
  ~Enter() { st_.leave_eval(); }
  Enter(const Enter&) = delete;
  Enter& operator=(const Enter&) = delete;

 private:
  State& st_;
};

}  // namespace

Value MacroObject::call(State& st, CallArgs& args) {
  if (!st.evaluator) runtime_error("macro called outside a render");
  return st.evaluator->call_macro(*this, args);
}

MarkedText Evaluator::run(const ast::Program& program, const std::shared_ptr<Scope>& root) {
  MarkedText out;
  out_ = &out;
  exec_body(program.body, root);
  out_ = nullptr;
  return out;
}

void Evaluator::emit(const MarkedText& text) {
  if (text.empty()) return;
  st_.add_output(text.size());
  out_->append(text);
}

Evaluator::Flow Evaluator::exec_body(const ast::Body& body, const std::shared_ptr<Scope>& scope) {
  for (const auto& node : body) {
    const Flow f = exec(*node, scope);
    if (f != Flow::kNormal) return f;
  }
  return Flow::kNormal;
}

Evaluator::Flow Evaluator::exec(const ast::Node& node, const std::shared_ptr<Scope>& scope) {
  Enter enter(st_, node);
  switch (node.kind) {
    case ast::Kind::kText: {
      const auto& text = static_cast<const ast::Text&>(node).text;
      st_.add_output(text.size());
      out_->append(text, true);
      return Flow::kNormal;
    }
    case ast::Kind::kOutput: emit(to_text(eval(*static_cast<const ast::Output&>(node).expr, *scope))); return Flow::kNormal;
    case ast::Kind::kIf: return exec_if(static_cast<const ast::If&>(node), scope);
    case ast::Kind::kFor: return exec_for(static_cast<const ast::For&>(node), scope);
    case ast::Kind::kSet: exec_set(static_cast<const ast::Set&>(node), *scope); return Flow::kNormal;
    case ast::Kind::kSetBlock: exec_set_block(static_cast<const ast::SetBlock&>(node), scope); return Flow::kNormal;
    case ast::Kind::kMacro: {
      const auto& m = static_cast<const ast::Macro&>(node);
      auto obj = std::make_shared<MacroObject>(&m, scope);
      st_.track(obj);
      scope->set(m.name, Value::object(std::move(obj)));
      return Flow::kNormal;
    }
    case ast::Kind::kFilterBlock: exec_filter_block(static_cast<const ast::FilterBlock&>(node), scope); return Flow::kNormal;
    case ast::Kind::kGeneration:
      // transformers' extension renders the body through a call block: its own scope.
      return exec_body(static_cast<const ast::Generation&>(node).body, std::make_shared<Scope>(scope));
    case ast::Kind::kWith: exec_with(static_cast<const ast::With&>(node), scope); return Flow::kNormal;
    case ast::Kind::kBreak: return Flow::kBreak;
    case ast::Kind::kContinue: return Flow::kContinue;
    default: runtime_error("internal: expression in statement position");
  }
}

Evaluator::Flow Evaluator::exec_if(const ast::If& node, const std::shared_ptr<Scope>& scope) {
  for (const auto& [test, body] : node.branches)
    if (truthy(eval(*test, *scope))) return exec_body(body, scope);
  return exec_body(node.else_body, scope);
}

Evaluator::Flow Evaluator::exec_for(const ast::For& node, const std::shared_ptr<Scope>& scope) {
  const Value iterable = eval(*node.iter, *scope);
  std::vector<Value> items = iterate(st_, iterable);
  if (node.filter) {
    std::vector<Value> kept;
    for (Value& item : items) {
      auto filter_scope = std::make_shared<Scope>(scope);
      assign(node.target, item, *filter_scope);
      if (truthy(eval(*node.filter, *filter_scope))) kept.push_back(std::move(item));
    }
    items = std::move(kept);
  }
  if (items.empty()) {
    if (!node.else_body.empty()) exec_body(node.else_body, std::make_shared<Scope>(scope));
    return Flow::kNormal;
  }
  auto shared_items = std::make_shared<const std::vector<Value>>(std::move(items));
  auto loop = std::make_shared<Loop>(shared_items);
  const Value loop_value = Value::object(loop);
  // jinja2 clears its "run the else block" flag at the end of each iteration's body, so the
  // else block also runs when every iteration was cut short by break or continue.
  bool run_else = true;
  for (size_t i = 0; i < shared_items->size(); ++i) {
    st_.pos = node.pos;
    st_.step();
    auto iter_scope = std::make_shared<Scope>(scope);
    loop->set_index(i);
    assign(node.target, (*shared_items)[i], *iter_scope);
    iter_scope->set("loop", loop_value);
    const Flow f = exec_body(node.body, iter_scope);
    if (f == Flow::kBreak) break;
    if (f == Flow::kNormal) run_else = false;
  }
  if (run_else && !node.else_body.empty()) exec_body(node.else_body, std::make_shared<Scope>(scope));
  return Flow::kNormal;
}

void Evaluator::assign(const ast::Target& target, Value value, Scope& scope) {
  switch (target.kind) {
    case ast::Target::Kind::kName: scope.set(target.name, std::move(value)); return;
    case ast::Target::Kind::kTuple: {
      std::vector<Value> parts = iterate(st_, value);
      if (parts.size() != target.items.size()) {
        st_.pos = target.pos;
        if (parts.size() > target.items.size())
          runtime_error("too many values to unpack (expected " + std::to_string(target.items.size()) + ")");
        runtime_error("not enough values to unpack (expected " + std::to_string(target.items.size()) + ", got " +
                      std::to_string(parts.size()) + ")");
      }
      for (size_t i = 0; i < parts.size(); ++i) assign(target.items[i], std::move(parts[i]), scope);
      return;
    }
    case ast::Target::Kind::kAttr: {
      const Value* ns = scope.find(target.name);
      Namespace* obj = ns ? ns->object_as<Namespace>() : nullptr;
      if (!obj) {
        st_.pos = target.pos;
        runtime_error("cannot assign attribute on non-namespace object");
      }
      obj->set(target.attr, std::move(value));
      return;
    }
  }
}

void Evaluator::exec_set(const ast::Set& node, Scope& scope) { assign(node.target, eval(*node.value, scope), scope); }

MarkedText Evaluator::capture(const ast::Body& body, const std::shared_ptr<Scope>& parent) {
  MarkedText buffer;
  MarkedText* saved = out_;
  out_ = &buffer;
  try {
    exec_body(body, std::make_shared<Scope>(parent));
  } catch (...) {
    out_ = saved;
    throw;
  }
  out_ = saved;
  return buffer;
}

void Evaluator::exec_set_block(const ast::SetBlock& node, const std::shared_ptr<Scope>& scope) {
  Value v = Value::string(capture(node.body, scope));
  v = apply_filters(node.filters, std::move(v), *scope);
  assign(node.target, std::move(v), *scope);
}

void Evaluator::exec_filter_block(const ast::FilterBlock& node, const std::shared_ptr<Scope>& scope) {
  Value v = Value::string(capture(node.body, scope));
  emit(to_text(apply_filters(node.filters, std::move(v), *scope)));
}

void Evaluator::exec_with(const ast::With& node, const std::shared_ptr<Scope>& scope) {
  auto inner = std::make_shared<Scope>(scope);
  std::vector<Value> values;
  for (const auto& a : node.assignments) values.push_back(eval(*a.second, *scope));
  for (size_t i = 0; i < values.size(); ++i) assign(node.assignments[i].first, std::move(values[i]), *inner);
  exec_body(node.body, inner);
}

Value Evaluator::apply_filters(const std::vector<ast::NodePtr>& filters, Value value, Scope& scope) {
  for (const auto& f : filters) value = eval_filter(static_cast<const ast::Filter&>(*f), std::move(value), scope);
  return value;
}

Value Evaluator::call_macro(const MacroObject& macro, CallArgs& args) {
  const ast::Macro& m = macro.node();
  if (!macro.closure()) runtime_error("macro '" + m.name + "' called after its render ended");
  st_.enter_call();
  struct Leave {
    State& st;
    ~Leave() { st.leave_call(); }
  } leave{st_};
  auto scope = std::make_shared<Scope>(macro.closure());
  const size_t n = m.params.size();
  std::vector<bool> bound(n, false);
  for (size_t i = 0; i < args.positional.size() && i < n; ++i) {
    scope->set(m.params[i], args.positional[i]);
    bound[i] = true;
  }
  if (args.positional.size() > n && !m.catch_varargs)
    runtime_error("macro '" + m.name + "' takes not more than " + std::to_string(n) + " argument(s)");
  std::vector<std::pair<Value, Value>> extra_kwargs;
  for (auto& [key, value] : args.keyword) {
    size_t i = 0;
    while (i < n && m.params[i] != key) ++i;
    if (i < n) {
      if (bound[i]) runtime_error("macro '" + m.name + "' got multiple values for argument '" + key + "'");
      scope->set(key, value);
      bound[i] = true;
    } else if (m.catch_kwargs) {
      extra_kwargs.emplace_back(Value::literal(key), value);
    } else {
      runtime_error("macro '" + m.name + "' takes no keyword argument '" + key + "'");
    }
  }
  for (size_t i = 0; i < n; ++i) {
    if (bound[i]) continue;
    if (m.defaults[i]) {
      scope->set(m.params[i], eval(*m.defaults[i], *scope));
    } else {
      scope->set(m.params[i], Value::undefined("parameter '" + m.params[i] + "' was not provided"));
    }
  }
  if (m.catch_varargs) {
    std::vector<Value> rest;
    for (size_t i = n; i < args.positional.size(); ++i) rest.push_back(args.positional[i]);
    scope->set("varargs", Value::list(std::move(rest), SeqKind::kTuple));
  }
  if (m.catch_kwargs) scope->set("kwargs", Value::dict(std::move(extra_kwargs)));
  MarkedText buffer;
  MarkedText* saved = out_;
  out_ = &buffer;
  try {
    exec_body(m.body, scope);
  } catch (...) {
    out_ = saved;
    throw;
  }
  out_ = saved;
  return Value::string(std::move(buffer));
}

// ---- expressions ----

Value Evaluator::eval(const ast::Node& node, Scope& scope) {
  Enter enter(st_, node);
  switch (node.kind) {
    case ast::Kind::kLiteral: return static_cast<const ast::Literal&>(node).value;
    case ast::Kind::kName: {
      const auto& name = static_cast<const ast::Name&>(node).name;
      if (const Value* v = scope.find(name)) return *v;
      return Value::undefined("'" + name + "' is undefined");
    }
    case ast::Kind::kGetAttr: {
      const auto& g = static_cast<const ast::GetAttr&>(node);
      const Value obj = eval(*g.object, scope);
      st_.pos = node.pos;
      return get_attr(st_, obj, g.attr);
    }
    case ast::Kind::kGetItem: {
      const auto& g = static_cast<const ast::GetItem&>(node);
      const Value obj = eval(*g.object, scope);
      const Value key = eval(*g.index, scope);
      st_.pos = node.pos;
      return get_item(st_, obj, key);
    }
    case ast::Kind::kSlice: return eval_slice(static_cast<const ast::Slice&>(node), scope);
    case ast::Kind::kCall: return eval_call(static_cast<const ast::Call&>(node), scope);
    case ast::Kind::kFilter: {
      const auto& f = static_cast<const ast::Filter&>(node);
      return eval_filter(f, eval(*f.input, scope), scope);
    }
    case ast::Kind::kTest: return eval_test(static_cast<const ast::Test&>(node), scope);
    case ast::Kind::kNeg: {
      const Value v = eval(*static_cast<const ast::Unary&>(node).operand, scope);
      st_.pos = node.pos;
      return negate(v);
    }
    case ast::Kind::kPos: {
      const Value v = eval(*static_cast<const ast::Unary&>(node).operand, scope);
      st_.pos = node.pos;
      return unary_plus(v);
    }
    case ast::Kind::kNot: return Value::boolean(!truthy(eval(*static_cast<const ast::Unary&>(node).operand, scope)));
    case ast::Kind::kBinary: {
      const auto& b = static_cast<const ast::Binary&>(node);
      const Value l = eval(*b.left, scope);
      const Value r = eval(*b.right, scope);
      st_.pos = node.pos;
      return binary_op(st_, b.op, l, r);
    }
    case ast::Kind::kAnd: {
      const auto& l = static_cast<const ast::Logical&>(node);
      Value left = eval(*l.left, scope);
      if (!truthy(left)) return left;
      return eval(*l.right, scope);
    }
    case ast::Kind::kOr: {
      const auto& l = static_cast<const ast::Logical&>(node);
      Value left = eval(*l.left, scope);
      if (truthy(left)) return left;
      return eval(*l.right, scope);
    }
    case ast::Kind::kConcat: return eval_concat(static_cast<const ast::Concat&>(node), scope);
    case ast::Kind::kCompare: return eval_compare(static_cast<const ast::Compare&>(node), scope);
    case ast::Kind::kCondExpr: {
      const auto& c = static_cast<const ast::CondExpr&>(node);
      if (truthy(eval(*c.test, scope))) return eval(*c.then_expr, scope);
      if (c.else_expr) return eval(*c.else_expr, scope);
      return Value::undefined("the inline if-expression on line " + std::to_string(node.pos.line) +
                              " evaluated to false and no else section was defined.");
    }
    case ast::Kind::kList:
    case ast::Kind::kTuple: return eval_sequence(static_cast<const ast::Sequence&>(node), scope);
    case ast::Kind::kDict: return eval_dict(static_cast<const ast::DictLiteral&>(node), scope);
    default: runtime_error("internal: statement in expression position");
  }
}

CallArgs Evaluator::eval_args(const ast::Arguments& args, Scope& scope) {
  CallArgs out;
  out.positional.reserve(args.positional.size());
  for (const auto& p : args.positional) out.positional.push_back(eval(*p, scope));
  if (args.star_args) {
    for (Value& v : iterate(st_, eval(*args.star_args, scope))) out.positional.push_back(std::move(v));
  }
  for (const auto& [k, v] : args.keyword) out.keyword.emplace_back(k, eval(*v, scope));
  if (args.star_kwargs) {
    const Value d = eval(*args.star_kwargs, scope);
    if (!d.is_dict()) runtime_error("argument after ** must be a mapping, not " + type_name(d));
    for (const auto& [k, v] : d.dict_data().items) {
      if (!k.is_string()) runtime_error("keywords must be strings");
      out.keyword.emplace_back(k.str(), v);
    }
  }
  for (size_t i = 0; i < out.keyword.size(); ++i)
    for (size_t j = 0; j < i; ++j)
      if (out.keyword[i].first == out.keyword[j].first)
        runtime_error("got multiple values for keyword argument '" + out.keyword[i].first + "'");
  return out;
}

Value Evaluator::eval_call(const ast::Call& node, Scope& scope) {
  const Value callee = eval(*node.callee, scope);
  CallArgs args = eval_args(node.args, scope);
  st_.pos = node.pos;
  if (callee.is_undefined()) fail_undefined(callee);
  if (!callee.is_object() || !callee.obj().callable()) runtime_error("'" + type_name(callee) + "' object is not callable");
  return account(callee.obj().call(st_, args));
}

Value Evaluator::account(Value v) {
  // What a builtin built counts against the allocation budget (over-counting shared values).
  if (v.is_string()) {
    st_.check_string_size(v.str().size());
  } else if (v.is_list()) {
    st_.check_list_size(v.items().size());
  } else if (v.is_dict()) {
    st_.check_list_size(2 * v.dict_data().items.size());
  }
  return v;
}

Value Evaluator::eval_filter(const ast::Filter& node, Value input, Scope& scope) {
  CallArgs args = eval_args(node.args, scope);
  st_.pos = node.pos;
  if (!node.fn) runtime_error("No filter named '" + node.name + "'.");
  return account(node.fn(st_, input, args));
}

Value Evaluator::eval_test(const ast::Test& node, Scope& scope) {
  const Value input = eval(*node.input, scope);
  CallArgs args = eval_args(node.args, scope);
  st_.pos = node.pos;
  if (!node.fn) runtime_error("No test named '" + node.name + "'.");
  return Value::boolean(node.fn(st_, input, args));
}

Value Evaluator::eval_compare(const ast::Compare& node, Scope& scope) {
  Value left = eval(*node.first, scope);
  for (const auto& [op, expr] : node.rest) {
    Value right = eval(*expr, scope);
    st_.pos = node.pos;
    if (!compare(st_, op, left, right)) return Value::boolean(false);
    left = std::move(right);
  }
  return Value::boolean(true);
}

Value Evaluator::eval_concat(const ast::Concat& node, Scope& scope) {
  MarkedText out;
  for (const auto& part : node.parts) {
    out.append(to_text(eval(*part, scope)));
    st_.check_string_size(out.size());
  }
  return Value::string(std::move(out));
}

Value Evaluator::eval_slice(const ast::Slice& node, Scope& scope) {
  const Value obj = eval(*node.object, scope);
  std::optional<Value> start, stop, step;
  if (node.start) start = eval(*node.start, scope);
  if (node.stop) stop = eval(*node.stop, scope);
  if (node.step) step = eval(*node.step, scope);
  st_.pos = node.pos;
  return get_slice(st_, obj, start, stop, step);
}

Value Evaluator::eval_sequence(const ast::Sequence& node, Scope& scope) {
  std::vector<Value> items;
  items.reserve(node.items.size());
  for (const auto& item : node.items) items.push_back(eval(*item, scope));
  st_.pos = node.pos;
  return Value::list(std::move(items), node.kind == ast::Kind::kTuple ? SeqKind::kTuple : SeqKind::kList);
}

Value Evaluator::eval_dict(const ast::DictLiteral& node, Scope& scope) {
  std::vector<std::pair<Value, Value>> items;
  items.reserve(node.items.size());
  for (const auto& [k, v] : node.items) {
    Value key = eval(*k, scope);
    Value value = eval(*v, scope);
    if (key.is_dict() || (key.is_list() && key.seq_kind() != SeqKind::kTuple)) {
      st_.pos = k->pos;
      runtime_error("unhashable type: '" + type_name(key) + "'");
    }
    bool replaced = false;
    for (auto& [ek, ev] : items)
      if (values_equal(ek, key)) {
        ev = std::move(value);
        replaced = true;
        break;
      }
    if (!replaced) items.emplace_back(std::move(key), std::move(value));
  }
  st_.pos = node.pos;
  return Value::dict(std::move(items));
}

}  // namespace ubatch::jinja
