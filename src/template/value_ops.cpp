// Python semantics of values (value_ops.h).
#include "template/value_ops.h"

#include <cmath>
#include <cstdio>
#include <limits>

#include "template/error.h"
#include "template/methods.h"
#include "template/py_format.h"
#include "template/state.h"
#include "template/unicode.h"

namespace ubatch::jinja {

namespace {

[[noreturn]] void type_error(std::string message) { runtime_error(std::move(message)); }

std::string quoted(std::string_view s) {
  std::string out;
  out.reserve(s.size() + 2);
  out.push_back('\'');
  out.append(s);
  out.push_back('\'');
  return out;
}

// jinja2's object_type_repr: how an undefined's hint names the object it came from.
std::string object_type_repr(const Value& v) {
  if (v.is_none()) return "None";
  return type_name(v) + " object";
}

std::string elements_repr(const std::vector<Value>& items, size_t from = 0) {
  std::string out;
  for (size_t i = from; i < items.size(); ++i) {
    if (i > from) out += ", ";
    out += repr(items[i]);
  }
  return out;
}

}  // namespace

void fail_undefined(const Value& v) {
  std::string hint = v.undefined_hint();
  if (v.undefined_is_unsafe()) runtime_error("SecurityError: " + hint);
  runtime_error(std::move(hint));
}

bool truthy(const Value& v) {
  switch (v.type()) {
    case Value::Type::kUndefined:
    case Value::Type::kNone: return false;
    case Value::Type::kBool: return v.as_bool();
    case Value::Type::kInt: return v.as_int() != 0;
    case Value::Type::kFloat: return v.as_float() != 0;
    case Value::Type::kString: return !v.str().empty();
    case Value::Type::kList: return v.is_iterator() || !v.items().empty();
    case Value::Type::kDict: return !v.dict_data().items.empty();
    case Value::Type::kObject: return true;
  }
  return false;
}

bool values_equal(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (!a.is_float() && !b.is_float()) return a.to_int() == b.to_int();
    return a.to_float() == b.to_float();
  }
  if (a.type() != b.type()) return false;
  switch (a.type()) {
    case Value::Type::kUndefined:
    case Value::Type::kNone: return true;
    case Value::Type::kString: return a.str() == b.str();
    case Value::Type::kList: {
      if (a.seq_kind() != b.seq_kind() || a.is_iterator()) return a.same_as(b);
      const auto& x = a.items();
      const auto& y = b.items();
      if (x.size() != y.size()) return false;
      for (size_t i = 0; i < x.size(); ++i)
        if (!values_equal(x[i], y[i])) return false;
      return true;
    }
    case Value::Type::kDict: {
      const auto& x = a.dict_data();
      const auto& y = b.dict_data();
      if (x.items.size() != y.items.size()) return false;
      for (const auto& [k, v] : x.items) {
        const Value* other = y.find(k);
        if (!other || !values_equal(v, *other)) return false;
      }
      return true;
    }
    default: return a.same_as(b);
  }
}

int compare_values(const Value& a, const Value& b, std::string_view op) {
  if (a.is_number() && b.is_number()) {
    if (!a.is_float() && !b.is_float()) {
      const int64_t x = a.to_int(), y = b.to_int();
      return x < y ? -1 : (x > y ? 1 : 0);
    }
    const double x = a.to_float(), y = b.to_float();
    if (std::isnan(x) || std::isnan(y)) return 2;  // unordered: every comparison false
    return x < y ? -1 : (x > y ? 1 : 0);
  }
  if (a.is_string() && b.is_string()) {
    const int c = a.str().compare(b.str());  // UTF-8 byte order = code point order
    return c < 0 ? -1 : (c > 0 ? 1 : 0);
  }
  if (a.is_list() && b.is_list() && a.seq_kind() == b.seq_kind() &&
      (a.seq_kind() == SeqKind::kList || a.seq_kind() == SeqKind::kTuple)) {
    const auto& x = a.items();
    const auto& y = b.items();
    for (size_t i = 0; i < x.size() && i < y.size(); ++i)
      if (!values_equal(x[i], y[i])) return compare_values(x[i], y[i], op);
    return x.size() < y.size() ? -1 : (x.size() > y.size() ? 1 : 0);
  }
  if (a.is_undefined()) fail_undefined(a);
  if (b.is_undefined()) fail_undefined(b);
  type_error("'" + std::string(op) + "' not supported between instances of " + quoted(type_name(a)) + " and " +
             quoted(type_name(b)));
}

bool compare(State& st, CmpOp op, const Value& a, const Value& b) {
  switch (op) {
    case CmpOp::kEq: return values_equal(a, b);
    case CmpOp::kNe: return !values_equal(a, b);
    case CmpOp::kIn: return contains(st, b, a);
    case CmpOp::kNotIn: return !contains(st, b, a);
    case CmpOp::kLt: return compare_values(a, b, "<") == -1;
    case CmpOp::kLe: {
      const int c = compare_values(a, b, "<=");
      return c == -1 || c == 0;
    }
    case CmpOp::kGt: return compare_values(a, b, ">") == 1;
    case CmpOp::kGe: {
      const int c = compare_values(a, b, ">=");
      return c == 1 || c == 0;
    }
  }
  return false;
}

std::string repr_string(std::string_view s) {
  const bool has_single = s.find('\'') != std::string_view::npos;
  const bool has_double = s.find('"') != std::string_view::npos;
  const char quote = has_single && !has_double ? '"' : '\'';
  std::string out(1, quote);
  for (size_t i = 0; i < s.size();) {
    const size_t start = i;
    const uint32_t cp = unicode::next(s, i);
    char buf[16];
    if (cp == static_cast<uint32_t>(quote) || cp == '\\') {
      out += '\\';
      out += static_cast<char>(cp);
    } else if (cp == '\t') {
      out += "\\t";
    } else if (cp == '\n') {
      out += "\\n";
    } else if (cp == '\r') {
      out += "\\r";
    } else if (cp < 0x20 || cp == 0x7F) {
      std::snprintf(buf, sizeof buf, "\\x%02x", cp);
      out += buf;
    } else if (cp < 0x7F || unicode::is_printable(cp)) {
      out.append(s.substr(start, i - start));
    } else {
      if (cp <= 0xFF) {
        std::snprintf(buf, sizeof buf, "\\x%02x", cp);
      } else if (cp <= 0xFFFF) {
        std::snprintf(buf, sizeof buf, "\\u%04x", cp);
      } else {
        std::snprintf(buf, sizeof buf, "\\U%08x", cp);
      }
      out += buf;
    }
  }
  out += quote;
  return out;
}

std::string repr(const Value& v) {
  switch (v.type()) {
    case Value::Type::kUndefined: return "Undefined";
    case Value::Type::kString: return v.is_safe() ? "Markup(" + repr_string(v.str()) + ")" : repr_string(v.str());
    case Value::Type::kList: {
      const auto& items = v.items();
      switch (v.seq_kind()) {
        case SeqKind::kList: return "[" + elements_repr(items) + "]";
        case SeqKind::kTuple: return "(" + elements_repr(items) + (items.size() == 1 ? ",)" : ")");
        case SeqKind::kIterator: return "<generator object>";
        case SeqKind::kItemsView: return "dict_items([" + elements_repr(items) + "])";
        case SeqKind::kKeysView: return "dict_keys([" + elements_repr(items) + "])";
        case SeqKind::kValuesView: return "dict_values([" + elements_repr(items) + "])";
      }
      return "[]";
    }
    case Value::Type::kDict: {
      std::string out = "{";
      bool first = true;
      for (const auto& [k, val] : v.dict_data().items) {
        if (!first) out += ", ";
        first = false;
        out += repr(k);
        out += ": ";
        out += repr(val);
      }
      return out + "}";
    }
    case Value::Type::kObject: return v.obj().repr();
    default: return to_str(v);
  }
}

std::string to_str(const Value& v) {
  switch (v.type()) {
    case Value::Type::kUndefined: return "";
    case Value::Type::kNone: return "None";
    case Value::Type::kBool: return v.as_bool() ? "True" : "False";
    case Value::Type::kInt: return std::to_string(v.as_int());
    case Value::Type::kFloat: return float_repr(v.as_float());
    case Value::Type::kString: return v.str();
    default: return repr(v);
  }
}

MarkedText to_text(const Value& v) {
  if (v.is_string()) return v.text();
  if (v.is_undefined()) return MarkedText();
  return MarkedText::data(to_str(v));
}

bool all_literal(const Value& v) { return v.is_string() && v.text().all_literal(); }

std::string html_escape(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&#34;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
  return out;
}

MarkedText escape_value(const Value& v) {
  if (v.is_safe()) return v.text();
  return to_text(v).map_ranges([](std::string_view s) { return html_escape(s); });
}

namespace {

[[noreturn]] void int_overflow() { runtime_error("integer overflow (ints are 64-bit here)"); }

Value add(State& st, const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) return Value::number(a.to_float() + b.to_float());
    int64_t r;
    if (__builtin_add_overflow(a.to_int(), b.to_int(), &r)) int_overflow();
    return Value::integer(r);
  }
  if (a.is_string() && b.is_string()) {
    st.check_string_size(a.str().size() + b.str().size());
    if (a.is_safe() || b.is_safe()) {
      // markupsafe: Markup + str escapes the str; the result is Markup.
      MarkedText r = escape_value(a);
      r.append(escape_value(b));
      return Value::string(std::move(r), true);
    }
    MarkedText r = a.text();
    r.append(b.text());
    return Value::string(std::move(r));
  }
  if (a.is_list() && b.is_list() && a.seq_kind() == b.seq_kind() &&
      (a.seq_kind() == SeqKind::kList || a.seq_kind() == SeqKind::kTuple)) {
    st.check_list_size(a.items().size() + b.items().size());
    std::vector<Value> items = a.items();
    items.insert(items.end(), b.items().begin(), b.items().end());
    return Value::list(std::move(items), a.seq_kind());
  }
  if (a.is_undefined()) fail_undefined(a);
  if (b.is_undefined()) fail_undefined(b);
  if (a.is_string()) type_error("can only concatenate str (not \"" + type_name(b) + "\") to str");
  if (a.is_list() && a.seq_kind() == SeqKind::kList)
    type_error("can only concatenate list (not \"" + type_name(b) + "\") to list");
  type_error("unsupported operand type(s) for +: " + quoted(type_name(a)) + " and " + quoted(type_name(b)));
}

Value repeat(State& st, const Value& seq, int64_t n) {
  if (n < 0) n = 0;
  if (seq.is_string()) {
    const size_t len = seq.str().size();
    if (len > 0 && static_cast<uint64_t>(n) > st.limits().max_output_bytes / len + 1) st.check_string_size(SIZE_MAX);
    st.check_string_size(len * static_cast<size_t>(n));
    MarkedText r;
    for (int64_t i = 0; i < n; ++i) r.append(seq.text());
    return Value::string(std::move(r), seq.is_safe());
  }
  const size_t len = seq.items().size();
  if (len > 0 && static_cast<uint64_t>(n) > st.limits().max_output_bytes / len + 1) st.check_list_size(SIZE_MAX);
  st.check_list_size(len * static_cast<size_t>(n));
  std::vector<Value> items;
  for (int64_t i = 0; i < n; ++i) items.insert(items.end(), seq.items().begin(), seq.items().end());
  return Value::list(std::move(items), seq.seq_kind());
}

bool is_plain_sequence(const Value& v) {
  return v.is_list() && (v.seq_kind() == SeqKind::kList || v.seq_kind() == SeqKind::kTuple);
}

int64_t floor_div(int64_t a, int64_t b) {
  if (a == std::numeric_limits<int64_t>::min() && b == -1) int_overflow();
  int64_t q = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
  return q;
}

int64_t py_mod(int64_t a, int64_t b) {
  if (b == -1) return 0;
  int64_t r = a % b;
  if (r != 0 && ((r < 0) != (b < 0))) r += b;
  return r;
}

double py_fmod(double a, double b) {
  double r = std::fmod(a, b);
  if (r != 0) {
    if ((r < 0) != (b < 0)) r += b;
  } else {
    r = std::copysign(0.0, b);
  }
  return r;
}

const char* op_symbol(BinOp op) {
  switch (op) {
    case BinOp::kAdd: return "+";
    case BinOp::kSub: return "-";
    case BinOp::kMul: return "*";
    case BinOp::kDiv: return "/";
    case BinOp::kFloorDiv: return "//";
    case BinOp::kMod: return "%";
    case BinOp::kPow: return "** or pow()";
  }
  return "?";
}

}  // namespace

Value binary_op(State& st, BinOp op, const Value& a, const Value& b) {
  if (op == BinOp::kAdd) return add(st, a, b);
  if (op == BinOp::kMod && a.is_string()) return Value::string(percent_format(st, a.text(), b), a.is_safe());
  if (op == BinOp::kMul) {
    if ((a.is_string() || is_plain_sequence(a)) && (b.is_int() || b.is_bool())) return repeat(st, a, b.to_int());
    if ((b.is_string() || is_plain_sequence(b)) && (a.is_int() || a.is_bool())) return repeat(st, b, a.to_int());
  }
  if (!a.is_number() || !b.is_number()) {
    if (a.is_undefined()) fail_undefined(a);
    if (b.is_undefined()) fail_undefined(b);
    type_error(std::string("unsupported operand type(s) for ") + op_symbol(op) + ": " + quoted(type_name(a)) + " and " +
               quoted(type_name(b)));
  }
  const bool floats = a.is_float() || b.is_float();
  switch (op) {
    case BinOp::kSub: {
      if (floats) return Value::number(a.to_float() - b.to_float());
      int64_t r;
      if (__builtin_sub_overflow(a.to_int(), b.to_int(), &r)) int_overflow();
      return Value::integer(r);
    }
    case BinOp::kMul: {
      if (floats) return Value::number(a.to_float() * b.to_float());
      int64_t r;
      if (__builtin_mul_overflow(a.to_int(), b.to_int(), &r)) int_overflow();
      return Value::integer(r);
    }
    case BinOp::kDiv:
      if (b.to_float() == 0) runtime_error(floats ? "float division by zero" : "division by zero");
      return Value::number(a.to_float() / b.to_float());
    case BinOp::kFloorDiv:
      if (floats) {
        if (b.to_float() == 0) runtime_error("float floor division by zero");
        return Value::number(std::floor(a.to_float() / b.to_float()));
      }
      if (b.to_int() == 0) runtime_error("integer division or modulo by zero");
      return Value::integer(floor_div(a.to_int(), b.to_int()));
    case BinOp::kMod:
      if (floats) {
        if (b.to_float() == 0) runtime_error("float modulo");
        return Value::number(py_fmod(a.to_float(), b.to_float()));
      }
      if (b.to_int() == 0) runtime_error("integer division or modulo by zero");
      return Value::integer(py_mod(a.to_int(), b.to_int()));
    case BinOp::kPow: {
      if (!floats && b.to_int() >= 0) {
        int64_t base = a.to_int(), e = b.to_int(), r = 1;
        while (e > 0) {
          if ((e & 1) && __builtin_mul_overflow(r, base, &r)) int_overflow();
          e >>= 1;
          if (e > 0 && __builtin_mul_overflow(base, base, &base)) int_overflow();
        }
        return Value::integer(r);
      }
      if (a.to_float() == 0 && b.to_float() < 0) runtime_error("0.0 cannot be raised to a negative power");
      if (a.to_float() < 0 && std::floor(b.to_float()) != b.to_float())
        runtime_error("a negative number to a fractional power is complex (not supported)");
      return Value::number(std::pow(a.to_float(), b.to_float()));
    }
    default: break;
  }
  runtime_error("internal: unknown operator");
}

Value negate(const Value& v) {
  if (v.is_float()) return Value::number(-v.as_float());
  if (v.is_int() || v.is_bool()) {
    if (v.to_int() == std::numeric_limits<int64_t>::min()) int_overflow();
    return Value::integer(-v.to_int());
  }
  if (v.is_undefined()) fail_undefined(v);
  type_error("bad operand type for unary -: " + quoted(type_name(v)));
}

Value unary_plus(const Value& v) {
  if (v.is_float() || v.is_int()) return v;
  if (v.is_bool()) return Value::integer(v.to_int());
  if (v.is_undefined()) fail_undefined(v);
  type_error("bad operand type for unary +: " + quoted(type_name(v)));
}

bool contains(State& st, const Value& container, const Value& item) {
  switch (container.type()) {
    case Value::Type::kUndefined: return false;
    case Value::Type::kString:
      if (!item.is_string())
        type_error("'in <string>' requires string as left operand, not " + type_name(item));
      return container.str().find(item.str()) != std::string::npos;
    case Value::Type::kList: {
      const auto& items = container.items();
      const ListData& data = container.list_data();
      if (!data.pending_error.empty()) runtime_error(data.pending_error);
      const size_t from = container.is_iterator() ? data.next : 0;
      for (size_t i = from; i < items.size(); ++i) {
        st.step();
        if (values_equal(items[i], item)) {
          if (container.is_iterator()) data.next = i + 1;
          return true;
        }
      }
      if (container.is_iterator()) data.next = items.size();
      return false;
    }
    case Value::Type::kDict:
      if (item.is_list() || item.is_dict()) type_error("unhashable type: " + quoted(type_name(item)));
      return container.dict_data().find(item) != nullptr;
    default: type_error("argument of type " + quoted(type_name(container)) + " is not iterable");
  }
}

std::vector<Value> iterate(State& st, const Value& v) {
  switch (v.type()) {
    case Value::Type::kUndefined: return {};
    case Value::Type::kString: {
      std::vector<Value> out;
      const MarkedText& t = v.text();
      const std::string& s = t.str();
      st.check_list_size(unicode::length(s));
      st.check_string_size(s.size());
      for (size_t i = 0; i < s.size();) {
        const size_t b = i;
        i += unicode::seq_len(static_cast<unsigned char>(s[i]));
        out.push_back(Value::string(t.substr(b, i)));  // iterating a Markup gives plain str
      }
      return out;
    }
    case Value::Type::kList: {
      const ListData& data = v.list_data();
      if (!data.pending_error.empty()) runtime_error(data.pending_error);
      st.check_list_size(data.items.size() - (data.kind == SeqKind::kIterator ? data.next : 0));
      if (data.kind != SeqKind::kIterator) return data.items;
      std::vector<Value> rest(data.items.begin() + static_cast<std::ptrdiff_t>(data.next), data.items.end());
      data.next = data.items.size();
      return rest;
    }
    case Value::Type::kDict: {
      std::vector<Value> keys;
      st.check_list_size(v.dict_data().items.size());
      keys.reserve(v.dict_data().items.size());
      for (const auto& kv : v.dict_data().items) keys.push_back(kv.first);
      return keys;
    }
    default: type_error(quoted(type_name(v)) + " object is not iterable");
  }
}

int64_t length(const Value& v) {
  switch (v.type()) {
    case Value::Type::kUndefined: return 0;
    case Value::Type::kString: return static_cast<int64_t>(unicode::length(v.str()));
    case Value::Type::kList:
      if (v.is_iterator()) type_error("object of type 'generator' has no len()");
      return static_cast<int64_t>(v.items().size());
    case Value::Type::kDict: return static_cast<int64_t>(v.dict_data().items.size());
    default: type_error("object of type " + quoted(type_name(v)) + " has no len()");
  }
}

Value get_attr(State& st, const Value& obj, std::string_view name) {
  if (obj.is_undefined()) fail_undefined(obj);
  const bool dunder = name.size() >= 2 && name.substr(0, 2) == "__";
  if (dunder)
    return Value::undefined("access to attribute " + quoted(name) + " of " + quoted(type_name(obj)) + " object is unsafe.",
                            true);
  if (obj.is_object()) return obj.obj().attribute(st, name);
  if (auto m = find_method(obj, name)) return *m;
  if (obj.is_dict()) {
    if (const Value* v = obj.dict_data().find(name)) return *v;
  }
  return Value::undefined(quoted(object_type_repr(obj)) + " has no attribute " + quoted(name));
}

Value get_item(State& st, const Value& obj, const Value& key) {
  if (obj.is_undefined()) fail_undefined(obj);
  switch (obj.type()) {
    case Value::Type::kDict: {
      // An unhashable key is a TypeError, which jinja2's getitem turns into undefined.
      const bool hashable = !key.is_dict() && !(key.is_list() && key.seq_kind() != SeqKind::kTuple);
      if (hashable) {
        if (const Value* v = obj.dict_data().find(key)) return *v;
      }
      break;
    }
    case Value::Type::kList:
      if ((key.is_int() || key.is_bool()) && !obj.is_iterator() && obj.seq_kind() != SeqKind::kItemsView &&
          obj.seq_kind() != SeqKind::kKeysView && obj.seq_kind() != SeqKind::kValuesView) {
        const auto& items = obj.items();
        int64_t i = key.to_int();
        if (i < 0) i += static_cast<int64_t>(items.size());
        if (i >= 0 && i < static_cast<int64_t>(items.size())) return items[static_cast<size_t>(i)];
        return Value::undefined(quoted(object_type_repr(obj)) + " has no element " + std::to_string(key.to_int()));
      }
      break;
    case Value::Type::kString:
      if (key.is_int() || key.is_bool()) {
        const std::string& s = obj.str();
        const int64_t n = static_cast<int64_t>(unicode::length(s));
        int64_t i = key.to_int();
        if (i < 0) i += n;
        if (i >= 0 && i < n) {
          const size_t b = unicode::byte_offset(s, static_cast<size_t>(i));
          const size_t e = b + unicode::seq_len(static_cast<unsigned char>(s[b]));
          return Value::string(obj.text().substr(b, e), obj.is_safe());
        }
        return Value::undefined(quoted(object_type_repr(obj)) + " has no element " + std::to_string(key.to_int()));
      }
      break;
    default: break;
  }
  if (key.is_string()) return get_attr(st, obj, key.str());
  return Value::undefined(quoted(object_type_repr(obj)) + " has no element " + repr(key));
}

namespace {

// Python's PySlice_AdjustIndices: the positions a slice selects from a sequence of n.
std::vector<int64_t> slice_indices(int64_t n, const std::optional<Value>& start_v, const std::optional<Value>& stop_v,
                                   const std::optional<Value>& step_v) {
  auto as_index = [](const std::optional<Value>& v) -> std::optional<int64_t> {
    if (!v || v->is_none()) return std::nullopt;
    if (!v->is_int() && !v->is_bool()) {
      if (v->is_undefined()) fail_undefined(*v);
      runtime_error("slice indices must be integers or None or have an __index__ method");
    }
    return v->to_int();
  };
  const std::optional<int64_t> step_opt = as_index(step_v);
  const int64_t step = step_opt.value_or(1);
  if (step == 0) runtime_error("slice step cannot be zero");
  auto adjust = [&](std::optional<int64_t> x, bool is_start) -> int64_t {
    if (!x) {
      if (is_start) return step < 0 ? n - 1 : 0;
      return step < 0 ? -1 : n;
    }
    int64_t v = *x;
    if (v < 0) {
      v += n;
      if (v < 0) v = step < 0 ? -1 : 0;
    } else if (v >= n) {
      v = step < 0 ? n - 1 : n;
    }
    return v;
  };
  const int64_t start = adjust(as_index(start_v), true);
  const int64_t stop = adjust(as_index(stop_v), false);
  std::vector<int64_t> out;
  if (step > 0) {
    for (int64_t i = start; i < stop; i += step) out.push_back(i);
  } else {
    for (int64_t i = start; i > stop; i += step) out.push_back(i);
  }
  return out;
}

}  // namespace

Value get_slice(State& st, const Value& obj, const std::optional<Value>& start, const std::optional<Value>& stop,
                const std::optional<Value>& step) {
  if (obj.is_undefined()) fail_undefined(obj);
  if (obj.is_string()) {
    const std::string& s = obj.str();
    // Byte offset of every code point (and the end).
    std::vector<size_t> offsets;
    offsets.reserve(s.size() + 1);
    for (size_t i = 0; i < s.size(); i += unicode::seq_len(static_cast<unsigned char>(s[i]))) offsets.push_back(i);
    const int64_t n = static_cast<int64_t>(offsets.size());
    offsets.push_back(s.size());
    const std::vector<int64_t> idx = slice_indices(n, start, stop, step);
    st.check_string_size(idx.size() * 4);  // an upper bound of the slice's bytes
    MarkedText out;
    for (int64_t i : idx) out.append_range(obj.text(), offsets[static_cast<size_t>(i)], offsets[static_cast<size_t>(i) + 1]);
    return Value::string(std::move(out), obj.is_safe());
  }
  if (is_plain_sequence(obj)) {
    const auto& items = obj.items();
    const std::vector<int64_t> idx = slice_indices(static_cast<int64_t>(items.size()), start, stop, step);
    st.check_list_size(idx.size());
    std::vector<Value> out;
    out.reserve(idx.size());
    for (int64_t i : idx) out.push_back(items[static_cast<size_t>(i)]);
    return Value::list(std::move(out), obj.seq_kind());
  }
  // jinja2 compiles slices to a plain Python subscript (no getitem fallback): a TypeError.
  if (obj.is_dict()) type_error("unhashable type: 'slice'");
  type_error(quoted(type_name(obj)) + " object is not subscriptable");
}

}  // namespace ubatch::jinja
