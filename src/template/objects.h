// The objects a template can hold besides data: bound methods and global functions
// (callables implemented in C++), namespace() objects, the `loop` variable of a for loop,
// and jinja2's joiner/cycler helpers. Macros are objects too (evaluator.h: they run AST).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "template/value.h"

namespace ubatch::jinja {

// A C++ builtin bound to the value it is called on (str.split, dict.items, loop.cycle, …).
using MethodFn = Value (*)(State& st, const Value& self, CallArgs& args);
// A global function (namespace, range, raise_exception, …).
using FunctionFn = Value (*)(State& st, CallArgs& args);

class BoundMethod : public Object {
 public:
  BoundMethod(Value self, std::string name, MethodFn fn) : self_(std::move(self)), name_(std::move(name)), fn_(fn) {}
  std::string_view type_name() const override { return "builtin_function_or_method"; }
  std::string repr() const override { return "<built-in method " + name_ + ">"; }
  bool callable() const override { return true; }
  Value call(State& st, CallArgs& args) override { return fn_(st, self_, args); }
  uint32_t depth() const override { return self_.depth() + 1; }
  void release() override { self_ = Value(); }

 private:
  Value self_;
  std::string name_;
  MethodFn fn_;
};

class Function : public Object {
 public:
  Function(std::string name, FunctionFn fn) : name_(std::move(name)), fn_(fn) {}
  std::string_view type_name() const override { return "function"; }
  std::string repr() const override { return "<function " + name_ + ">"; }
  bool callable() const override { return true; }
  Value call(State& st, CallArgs& args) override { return fn_(st, args); }
  // `dict.fromkeys` is the one attribute of a global function templates use.
  Value attribute(State& st, std::string_view name) override;
  const std::string& name() const { return name_; }

 private:
  std::string name_;
  FunctionFn fn_;
};

// jinja2's Namespace as transformers subclasses it: attributes set with
// `{% set ns.attr = value %}` are visible across scopes; names starting with "_" are refused.
class Namespace : public Object {
 public:
  std::string_view type_name() const override { return "Namespace"; }
  std::string repr() const override;
  Value attribute(State& st, std::string_view name) override;
  uint32_t depth() const override { return depth_; }
  void release() override { attrs_.clear(); }
  // Sets (or replaces) an attribute; kRuntime for a "_" name, kLimit past kMaxValueDepth.
  void set(std::string_view name, Value value);

 private:
  std::vector<std::pair<std::string, Value>> attrs_;  // in first-assignment order
  uint32_t depth_ = 1;
};

// The `loop` variable: position in the (filtered) sequence and neighbours.
class Loop : public Object, public std::enable_shared_from_this<Loop> {
 public:
  explicit Loop(std::shared_ptr<const std::vector<Value>> items) : items_(std::move(items)) {}
  std::string_view type_name() const override { return "LoopContext"; }
  std::string repr() const override;
  Value attribute(State& st, std::string_view name) override;
  uint32_t depth() const override;
  void release() override { last_changed_.clear(); }
  void set_index(size_t index0) { index0_ = index0; }
  // loop.cycle(*values) and loop.changed(*values).
  Value cycle(const CallArgs& args) const;
  bool changed(const CallArgs& args);

 private:
  std::shared_ptr<const std::vector<Value>> items_;
  size_t index0_ = 0;
  std::vector<Value> last_changed_;
  bool has_changed_ = false;
};

// joiner(sep=", "): "" on the first call, sep after.
class Joiner : public Object {
 public:
  explicit Joiner(Value sep) : sep_(std::move(sep)) {}
  std::string_view type_name() const override { return "Joiner"; }
  bool callable() const override { return true; }
  Value call(State& st, CallArgs& args) override;
  uint32_t depth() const override { return sep_.depth() + 1; }

 private:
  Value sep_;
  bool used_ = false;
};

// cycler(*items): .next(), .current, .reset().
class Cycler : public Object, public std::enable_shared_from_this<Cycler> {
 public:
  explicit Cycler(std::vector<Value> items) : items_(std::move(items)) {}
  std::string_view type_name() const override { return "Cycler"; }
  Value attribute(State& st, std::string_view name) override;
  uint32_t depth() const override;
  void release() override { items_.clear(); }
  Value next();
  void reset() { pos_ = 0; }
  Value current() const { return items_.empty() ? Value() : items_[pos_]; }

 private:
  std::vector<Value> items_;
  size_t pos_ = 0;
};

}  // namespace ubatch::jinja
