// Scope: the variables visible at a point of a render, with jinja2's scoping rules:
//  - the root scope holds the globals (functions.h), then the render's variables, then
//    whatever top-level `{% set %}` assigns (so a set may replace a variable passed in);
//  - each for-loop iteration runs in a fresh child scope (assignments inside a loop body are
//    gone after the iteration and after the loop: that is what `namespace()` is for);
//  - a macro call runs in a child of the scope where the macro was defined (so it sees the
//    template's top-level variables as they are when it is called, not the caller's loop
//    variables);
//  - `{% if %}` has no scope of its own; set blocks, filter blocks, `with` and
//    `{% generation %}` do.
// Lookup walks from the innermost scope to the root.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "template/value.h"

namespace ubatch::jinja {

class Scope {
 public:
  explicit Scope(std::shared_ptr<Scope> parent) : parent_(std::move(parent)) {}

  // The innermost binding of `name`, or null.
  const Value* find(std::string_view name) const {
    for (const Scope* s = this; s; s = s->parent_.get())
      for (const auto& [k, v] : s->vars_)
        if (k == name) return &v;
    return nullptr;
  }
  // Binds `name` in this scope.
  void set(std::string_view name, Value value) {
    for (auto& [k, v] : vars_)
      if (k == name) {
        v = std::move(value);
        return;
      }
    vars_.emplace_back(std::string(name), std::move(value));
  }
  // Drops the bindings and the parent (breaks cycles through macros at the end of a render).
  void clear() {
    vars_.clear();
    parent_.reset();
  }

 private:
  std::shared_ptr<Scope> parent_;
  std::vector<std::pair<std::string, Value>> vars_;
};

}  // namespace ubatch::jinja
