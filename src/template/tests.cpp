// Built-in tests (tests.h), following jinja2/tests.py.
#include "template/tests.h"

#include <algorithm>

#include "template/args.h"
#include "template/error.h"
#include "template/filters.h"
#include "template/methods.h"
#include "template/objects.h"
#include "template/state.h"
#include "template/unicode.h"
#include "template/value_ops.h"

namespace ubatch::jinja {

namespace {

const Value& one_arg(const char* name, CallArgs& args) {
  if (args.positional.size() != 1 || !args.keyword.empty())
    runtime_error(std::string("test '") + name + "' takes exactly one argument");
  return args.positional[0];
}

void none_args(const char* name, CallArgs& args) {
  if (!args.positional.empty() || !args.keyword.empty())
    runtime_error(std::string("test '") + name + "' takes no arguments");
}

bool t_defined(State&, const Value& v, CallArgs& a) {
  none_args("defined", a);
  return !v.is_undefined();
}
bool t_undefined(State&, const Value& v, CallArgs& a) {
  none_args("undefined", a);
  return v.is_undefined();
}
bool t_none(State&, const Value& v, CallArgs& a) {
  none_args("none", a);
  return v.is_none();
}
bool t_boolean(State&, const Value& v, CallArgs& a) {
  none_args("boolean", a);
  return v.is_bool();
}
bool t_true(State&, const Value& v, CallArgs& a) {
  none_args("true", a);
  return v.is_bool() && v.as_bool();
}
bool t_false(State&, const Value& v, CallArgs& a) {
  none_args("false", a);
  return v.is_bool() && !v.as_bool();
}
bool t_integer(State&, const Value& v, CallArgs& a) {
  none_args("integer", a);
  return v.is_int();
}
bool t_float(State&, const Value& v, CallArgs& a) {
  none_args("float", a);
  return v.is_float();
}
bool t_number(State&, const Value& v, CallArgs& a) {
  none_args("number", a);
  return v.is_number();
}
bool t_string(State&, const Value& v, CallArgs& a) {
  none_args("string", a);
  return v.is_string();
}
bool t_mapping(State&, const Value& v, CallArgs& a) {
  none_args("mapping", a);
  return v.is_dict();
}
bool t_sequence(State&, const Value& v, CallArgs& a) {
  none_args("sequence", a);
  // len() and __getitem__: str, list, tuple, dict — and jinja2.Undefined.
  if (v.is_undefined() || v.is_string() || v.is_dict()) return true;
  return v.is_list() && (v.seq_kind() == SeqKind::kList || v.seq_kind() == SeqKind::kTuple);
}
bool t_iterable(State&, const Value& v, CallArgs& a) {
  none_args("iterable", a);
  return v.is_undefined() || v.is_string() || v.is_list() || v.is_dict() || v.object_as<Loop>() != nullptr;
}
bool t_callable(State&, const Value& v, CallArgs& a) {
  none_args("callable", a);
  return v.is_object() && v.obj().callable();
}
bool t_escaped(State&, const Value& v, CallArgs& a) {
  none_args("escaped", a);
  return v.is_safe();
}
bool t_lower(State&, const Value& v, CallArgs& a) {
  none_args("lower", a);
  const std::string s = to_str(v);
  bool cased = false;
  for (size_t i = 0; i < s.size();) {
    const uint32_t cp = unicode::next(s, i);
    if (unicode::is_upper(cp)) return false;
    cased = cased || unicode::is_lower(cp);
  }
  return cased;
}
bool t_upper(State&, const Value& v, CallArgs& a) {
  none_args("upper", a);
  const std::string s = to_str(v);
  bool cased = false;
  for (size_t i = 0; i < s.size();) {
    const uint32_t cp = unicode::next(s, i);
    if (unicode::is_lower(cp)) return false;
    cased = cased || unicode::is_upper(cp);
  }
  return cased;
}
bool t_odd(State& st, const Value& v, CallArgs& a) {
  none_args("odd", a);
  return values_equal(binary_op(st, BinOp::kMod, v, Value::integer(2)), Value::integer(1));
}
bool t_even(State& st, const Value& v, CallArgs& a) {
  none_args("even", a);
  return values_equal(binary_op(st, BinOp::kMod, v, Value::integer(2)), Value::integer(0));
}
bool t_divisibleby(State& st, const Value& v, CallArgs& a) {
  ArgBinder b("divisibleby", a, {"num"}, 1);
  return values_equal(binary_op(st, BinOp::kMod, v, b.get(0)), Value::integer(0));
}
bool t_sameas(State&, const Value& v, CallArgs& a) { return v.same_as(one_arg("sameas", a)); }
bool t_in(State& st, const Value& v, CallArgs& a) { return contains(st, one_arg("in", a), v); }
bool t_eq(State&, const Value& v, CallArgs& a) { return values_equal(v, one_arg("==", a)); }
bool t_ne(State&, const Value& v, CallArgs& a) { return !values_equal(v, one_arg("!=", a)); }
bool t_lt(State& st, const Value& v, CallArgs& a) { return compare(st, CmpOp::kLt, v, one_arg("<", a)); }
bool t_le(State& st, const Value& v, CallArgs& a) { return compare(st, CmpOp::kLe, v, one_arg("<=", a)); }
bool t_gt(State& st, const Value& v, CallArgs& a) { return compare(st, CmpOp::kGt, v, one_arg(">", a)); }
bool t_ge(State& st, const Value& v, CallArgs& a) { return compare(st, CmpOp::kGe, v, one_arg(">=", a)); }
bool t_filter(State&, const Value& v, CallArgs& a) {
  none_args("filter", a);
  return v.is_string() && find_filter(v.str()) != nullptr;
}
bool t_test(State&, const Value& v, CallArgs& a) {
  none_args("test", a);
  return v.is_string() && find_test(v.str()) != nullptr;
}

struct TestDef {
  std::string_view name;
  TestFn fn;
};

constexpr TestDef kTests[] = {
    {"!=", t_ne},
    {"<", t_lt},
    {"<=", t_le},
    {"==", t_eq},
    {">", t_gt},
    {">=", t_ge},
    {"boolean", t_boolean},
    {"callable", t_callable},
    {"defined", t_defined},
    {"divisibleby", t_divisibleby},
    {"eq", t_eq},
    {"equalto", t_eq},
    {"escaped", t_escaped},
    {"even", t_even},
    {"false", t_false},
    {"filter", t_filter},
    {"float", t_float},
    {"ge", t_ge},
    {"greaterthan", t_gt},
    {"gt", t_gt},
    {"in", t_in},
    {"integer", t_integer},
    {"iterable", t_iterable},
    {"le", t_le},
    {"lessthan", t_lt},
    {"lower", t_lower},
    {"lt", t_lt},
    {"mapping", t_mapping},
    {"ne", t_ne},
    {"none", t_none},
    {"number", t_number},
    {"odd", t_odd},
    {"sameas", t_sameas},
    {"sequence", t_sequence},
    {"string", t_string},
    {"test", t_test},
    {"true", t_true},
    {"undefined", t_undefined},
    {"upper", t_upper},
};

}  // namespace

TestFn find_test(std::string_view name) {
  for (const TestDef& t : kTests)
    if (t.name == name) return t.fn;
  return nullptr;
}

}  // namespace ubatch::jinja
