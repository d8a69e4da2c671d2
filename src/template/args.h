// ArgBinder: Python's argument binding for the builtins (filters, tests, methods, global
// functions): positional arguments fill the parameters in order, keyword arguments by name;
// too many positional arguments, an unknown keyword, a parameter given twice or a missing
// required one is a kRuntime error naming the function, as Python's TypeError does.
#pragma once

#include <cstddef>
#include <initializer_list>
#include <string>
#include <string_view>
#include <vector>

#include "template/error.h"
#include "template/value.h"

namespace ubatch::jinja {

class ArgBinder {
 public:
  // params: the parameter names in order; the first `required` must be given.
  ArgBinder(std::string_view fn, const CallArgs& args, std::initializer_list<std::string_view> params,
            size_t required = 0)
      : bound_(params.size(), nullptr) {
    const std::vector<std::string_view> names(params);
    if (args.positional.size() > names.size())
      runtime_error(std::string(fn) + "() takes at most " + std::to_string(names.size()) + " argument" +
                    (names.size() == 1 ? "" : "s") + " (" + std::to_string(args.positional.size()) + " given)");
    for (size_t i = 0; i < args.positional.size(); ++i) bound_[i] = &args.positional[i];
    for (const auto& [key, value] : args.keyword) {
      size_t i = 0;
      while (i < names.size() && names[i] != key) ++i;
      if (i == names.size()) runtime_error(std::string(fn) + "() got an unexpected keyword argument '" + key + "'");
      if (bound_[i]) runtime_error(std::string(fn) + "() got multiple values for argument '" + key + "'");
      bound_[i] = &value;
    }
    for (size_t i = 0; i < required && i < names.size(); ++i)
      if (!bound_[i]) runtime_error(std::string(fn) + "() missing required argument '" + std::string(names[i]) + "'");
  }

  bool has(size_t i) const { return bound_[i] != nullptr; }
  // The argument, or undefined when not given.
  const Value& get(size_t i) const { return bound_[i] ? *bound_[i] : undefined_; }
  Value get_or(size_t i, Value def) const { return bound_[i] ? *bound_[i] : def; }
  // Given and not None.
  bool has_value(size_t i) const { return bound_[i] && !bound_[i]->is_none(); }

 private:
  std::vector<const Value*> bound_;
  Value undefined_;
};

// A builtin that takes no arguments at all.
inline void no_args(std::string_view fn, const CallArgs& args) {
  if (!args.positional.empty() || !args.keyword.empty())
    runtime_error(std::string(fn) + "() takes no arguments");
}

}  // namespace ubatch::jinja
