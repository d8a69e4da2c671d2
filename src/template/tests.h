// Tests (`value is name(args)`, and the names select/reject/selectattr take): jinja2 3.1's
// built-in tests, one small function each.
//
//   boolean callable defined divisibleby eq equalto escaped even false filter float ge gt
//   greaterthan in integer iterable le lower lessthan lt mapping ne none number odd sameas
//   sequence string test true undefined upper, and the operators == != < <= > >=
// Python's answers are kept where they surprise: an undefined value `is iterable` and `is
// sequence`; a bool `is number` but not `is integer`; a dict `is sequence`.
#pragma once

#include <string_view>

#include "template/value.h"

namespace ubatch::jinja {

using TestFn = bool (*)(State& st, const Value& input, CallArgs& args);

// The test called `name`, or nullptr.
TestFn find_test(std::string_view name);

}  // namespace ubatch::jinja
