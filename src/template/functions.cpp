#include "template/functions.h"

#include <memory>

#include "template/args.h"
#include "template/error.h"
#include "template/objects.h"
#include "template/state.h"
#include "template/strftime.h"
#include "template/value_ops.h"

namespace ubatch::jinja {

namespace {

// Entries of a dict(...) / namespace(...) call: an optional mapping or iterable of pairs,
// then keywords (later ones win, as in Python).
std::vector<std::pair<Value, Value>> mapping_entries(State& st, const char* fn, CallArgs& args) {
  if (args.positional.size() > 1)
    runtime_error(std::string(fn) + " expected at most 1 argument, got " + std::to_string(args.positional.size()));
  std::vector<std::pair<Value, Value>> entries;
  auto put = [&](Value k, Value v) {
    for (auto& [ek, ev] : entries)
      if (values_equal(ek, k)) {
        ev = std::move(v);
        return;
      }
    entries.emplace_back(std::move(k), std::move(v));
  };
  if (!args.positional.empty()) {
    const Value& src = args.positional[0];
    if (src.is_dict()) {
      for (const auto& [k, v] : src.dict_data().items) put(k, v);
    } else {
      for (const Value& pair : iterate(st, src)) {
        const std::vector<Value> kv = iterate(st, pair);
        if (kv.size() != 2)
          runtime_error("dictionary update sequence element has length " + std::to_string(kv.size()) + "; 2 is required");
        if (kv[0].is_list() || kv[0].is_dict()) runtime_error("unhashable type: '" + type_name(kv[0]) + "'");
        put(kv[0], kv[1]);
      }
    }
  }
  for (auto& [k, v] : args.keyword) put(Value::literal(k), v);
  st.check_list_size(entries.size());
  return entries;
}

Value f_namespace(State& st, CallArgs& args) {
  auto ns = std::make_shared<Namespace>();
  for (auto& [k, v] : mapping_entries(st, "namespace", args)) {
    if (!k.is_string()) runtime_error("namespace() keywords must be strings");
    ns->set(k.str(), std::move(v));
  }
  st.track(ns);
  return Value::object(std::move(ns));
}

Value f_dict(State& st, CallArgs& args) { return Value::dict(mapping_entries(st, "dict", args)); }

Value m_fromkeys(State& st, const Value&, CallArgs& args) {
  ArgBinder a("fromkeys", args, {"iterable", "value"}, 1);
  std::vector<std::pair<Value, Value>> entries;
  const Value value = a.get_or(1, Value::none());
  for (const Value& k : iterate(st, a.get(0))) {
    bool dup = false;
    for (const auto& e : entries) dup = dup || values_equal(e.first, k);
    if (!dup) entries.emplace_back(k, value);
  }
  return Value::dict(std::move(entries));
}

int64_t int_arg(const Value& v) {
  if (!v.is_int() && !v.is_bool()) {
    if (v.is_undefined()) fail_undefined(v);
    runtime_error(concat({"'", type_name(v), "' object cannot be interpreted as an integer"}));
  }
  return v.to_int();
}

Value f_range(State& st, CallArgs& args) {
  if (!args.keyword.empty()) runtime_error("range() takes no keyword arguments");
  const auto& p = args.positional;
  if (p.empty() || p.size() > 3) runtime_error("range expected 1 to 3 arguments, got " + std::to_string(p.size()));
  int64_t start = 0, stop, step = 1;
  if (p.size() == 1) {
    stop = int_arg(p[0]);
  } else {
    start = int_arg(p[0]);
    stop = int_arg(p[1]);
    if (p.size() == 3) step = int_arg(p[2]);
  }
  if (step == 0) runtime_error("range() arg 3 must not be zero");
  // Number of elements, without overflow.
  uint64_t n = 0;
  if (step > 0 && start < stop) {
    n = (static_cast<uint64_t>(stop) - static_cast<uint64_t>(start) - 1) / static_cast<uint64_t>(step) + 1;
  } else if (step < 0 && start > stop) {
    n = (static_cast<uint64_t>(start) - static_cast<uint64_t>(stop) - 1) / (0 - static_cast<uint64_t>(step)) + 1;
  }
  st.check_list_size(n);
  std::vector<Value> items;
  items.reserve(n);
  int64_t v = start;
  for (uint64_t i = 0; i < n; ++i, v += (i < n ? step : 0)) items.push_back(Value::integer(v));
  return Value::list(std::move(items));
}

Value f_raise_exception(State&, CallArgs& args) {
  ArgBinder a("raise_exception", args, {"message"}, 1);
  throw_error(ErrorKind::kRaiseException, to_str(a.get(0)));
}

Value f_strftime_now(State& st, CallArgs& args) {
  ArgBinder a("strftime_now", args, {"format"}, 1);
  if (!a.get(0).is_string()) runtime_error("strftime() argument 1 must be str, not " + type_name(a.get(0)));
  const std::string s = py_strftime(st.now(), a.get(0).str());
  st.check_string_size(s.size());
  return Value::data(s);
}

Value f_joiner(State&, CallArgs& args) {
  ArgBinder a("joiner", args, {"sep"});
  return Value::object(std::make_shared<Joiner>(a.get_or(0, Value::data(", "))));
}

Value f_cycler(State& st, CallArgs& args) {
  if (!args.keyword.empty()) runtime_error("cycler() takes no keyword arguments");
  auto c = std::make_shared<Cycler>(args.positional);
  st.track(c);
  return Value::object(std::move(c));
}

}  // namespace

const std::vector<std::pair<std::string, Value>>& global_functions() {
  static const std::vector<std::pair<std::string, Value>> kGlobals = [] {
    std::vector<std::pair<std::string, Value>> g;
    auto add = [&](const char* name, FunctionFn fn) {
      g.emplace_back(name, Value::object(std::make_shared<Function>(name, fn)));
    };
    add("namespace", f_namespace);
    add("raise_exception", f_raise_exception);
    add("strftime_now", f_strftime_now);
    add("range", f_range);
    add("dict", f_dict);
    add("joiner", f_joiner);
    add("cycler", f_cycler);
    return g;
  }();
  return kGlobals;
}

Value dict_fromkeys_method() {
  static const Value kFromkeys = Value::object(std::make_shared<BoundMethod>(Value::none(), "fromkeys", m_fromkeys));
  return kFromkeys;
}

}  // namespace ubatch::jinja
