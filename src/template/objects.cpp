#include "template/objects.h"

#include <algorithm>

#include "template/args.h"
#include "template/error.h"
#include "template/functions.h"
#include "template/state.h"
#include "template/value_ops.h"

namespace ubatch::jinja {

Value Function::attribute(State& st, std::string_view name) {
  if (name_ == "dict" && name == "fromkeys") return dict_fromkeys_method();
  return Object::attribute(st, name);
}

std::string Namespace::repr() const {
  std::string out = "<Namespace {";
  bool first = true;
  for (const auto& [k, v] : attrs_) {
    if (!first) out += ", ";
    first = false;
    out += repr_string(k) + ": " + jinja::repr(v);
  }
  return out + "}>";
}

Value Namespace::attribute(State&, std::string_view name) {
  for (const auto& [k, v] : attrs_)
    if (k == name) return v;
  return Value::undefined("'Namespace object' has no attribute '" + std::string(name) + "'");
}

void Namespace::set(std::string_view name, Value value) {
  if (!name.empty() && name[0] == '_')
    runtime_error("SecurityError: namespace attribute '" + std::string(name) + "' starts with '_'");
  const uint32_t d = value.depth() + 1;
  check_nesting(d);
  depth_ = std::max(depth_, d);
  for (auto& [k, v] : attrs_)
    if (k == name) {
      v = std::move(value);
      return;
    }
  attrs_.emplace_back(std::string(name), std::move(value));
}

std::string Loop::repr() const {
  return "<LoopContext " + std::to_string(index0_ + 1) + "/" + std::to_string(items_->size()) + ">";
}

uint32_t Loop::depth() const {
  uint32_t d = 0;
  for (const Value& v : *items_) d = std::max(d, v.depth());
  return d + 2;
}

namespace {

Value loop_cycle(State&, const Value& self, CallArgs& args) {
  return self.object_as<Loop>()->cycle(args);
}

Value loop_changed(State&, const Value& self, CallArgs& args) {
  return Value::boolean(self.object_as<Loop>()->changed(args));
}

}  // namespace

Value Loop::attribute(State&, std::string_view name) {
  const int64_t n = static_cast<int64_t>(items_->size());
  const int64_t i = static_cast<int64_t>(index0_);
  if (name == "index") return Value::integer(i + 1);
  if (name == "index0") return Value::integer(i);
  if (name == "revindex") return Value::integer(n - i);
  if (name == "revindex0") return Value::integer(n - i - 1);
  if (name == "first") return Value::boolean(i == 0);
  if (name == "last") return Value::boolean(i == n - 1);
  if (name == "length") return Value::integer(n);
  if (name == "depth") return Value::integer(1);
  if (name == "depth0") return Value::integer(0);
  if (name == "previtem") return i > 0 ? (*items_)[index0_ - 1] : Value::undefined("there is no previous item");
  if (name == "nextitem") return i + 1 < n ? (*items_)[index0_ + 1] : Value::undefined("there is no next item");
  if (name == "cycle") return Value::object(std::make_shared<BoundMethod>(Value::object(shared_from_this()), "cycle", loop_cycle));
  if (name == "changed")
    return Value::object(std::make_shared<BoundMethod>(Value::object(shared_from_this()), "changed", loop_changed));
  return Value::undefined("'LoopContext object' has no attribute '" + std::string(name) + "'");
}

Value Loop::cycle(const CallArgs& args) const {
  if (args.positional.empty()) runtime_error("no items for cycling given");
  return args.positional[index0_ % args.positional.size()];
}

bool Loop::changed(const CallArgs& args) {
  const std::vector<Value>& now = args.positional;
  bool same = has_changed_ && now.size() == last_changed_.size();
  for (size_t i = 0; same && i < now.size(); ++i) same = values_equal(now[i], last_changed_[i]);
  if (same) return false;
  last_changed_ = now;
  has_changed_ = true;
  return true;
}

Value Joiner::call(State&, CallArgs& args) {
  no_args("joiner", args);
  if (!used_) {
    used_ = true;
    return Value::data("");
  }
  return sep_;
}

uint32_t Cycler::depth() const {
  uint32_t d = 0;
  for (const Value& v : items_) d = std::max(d, v.depth());
  return d + 1;
}

Value Cycler::next() {
  if (items_.empty()) return Value();
  Value v = items_[pos_];
  pos_ = (pos_ + 1) % items_.size();
  return v;
}

namespace {

Value cycler_next(State&, const Value& self, CallArgs& args) {
  no_args("next", args);
  return self.object_as<Cycler>()->next();
}

Value cycler_reset(State&, const Value& self, CallArgs& args) {
  no_args("reset", args);
  self.object_as<Cycler>()->reset();
  return Value::none();
}

}  // namespace

Value Cycler::attribute(State& st, std::string_view name) {
  if (name == "current") return current();
  if (name == "next") return Value::object(std::make_shared<BoundMethod>(Value::object(shared_from_this()), "next", cycler_next));
  if (name == "reset")
    return Value::object(std::make_shared<BoundMethod>(Value::object(shared_from_this()), "reset", cycler_reset));
  return Object::attribute(st, name);
}

}  // namespace ubatch::jinja
