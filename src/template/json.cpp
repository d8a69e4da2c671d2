#include "template/json.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>

#include "template/error.h"
#include "template/py_format.h"
#include "template/state.h"
#include "template/unicode.h"
#include "template/value_ops.h"

namespace ubatch::jinja {

namespace {

Value from_json_at(const nlohmann::ordered_json& j, bool literal, uint32_t depth) {
  using T = nlohmann::ordered_json::value_t;
  switch (j.type()) {
    case T::null: return Value::none();
    case T::boolean: return Value::boolean(j.get<bool>());
    case T::number_integer: return Value::integer(j.get<int64_t>());
    case T::number_unsigned: {
      const uint64_t u = j.get<uint64_t>();
      if (u <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return Value::integer(static_cast<int64_t>(u));
      return Value::number(static_cast<double>(u));
    }
    case T::number_float: return Value::number(j.get<double>());
    case T::string: return Value::string(MarkedText(j.get_ref<const std::string&>(), literal));
    case T::array: {
      check_nesting(depth + 1);
      std::vector<Value> items;
      items.reserve(j.size());
      for (const auto& e : j) items.push_back(from_json_at(e, literal, depth + 1));
      return Value::list(std::move(items));
    }
    case T::object: {
      check_nesting(depth + 1);
      std::vector<std::pair<Value, Value>> items;
      items.reserve(j.size());
      for (const auto& [k, e] : j.items())
        items.emplace_back(Value::string(MarkedText(k, literal)), from_json_at(e, literal, depth + 1));
      return Value::dict(std::move(items));
    }
    default: runtime_error("JSON value of this type (binary) cannot be passed to a template");
  }
}

void append_string(std::string& out, std::string_view s, bool ensure_ascii) {
  out += '"';
  for (size_t i = 0; i < s.size();) {
    const size_t start = i;
    const uint32_t cp = unicode::next(s, i);
    char buf[16];
    switch (cp) {
      case '"': out += "\\\""; continue;
      case '\\': out += "\\\\"; continue;
      case '\n': out += "\\n"; continue;
      case '\r': out += "\\r"; continue;
      case '\t': out += "\\t"; continue;
      case '\b': out += "\\b"; continue;
      case '\f': out += "\\f"; continue;
      default: break;
    }
    if (cp < 0x20) {
      std::snprintf(buf, sizeof buf, "\\u%04x", cp);
      out += buf;
    } else if (cp < 0x80 || !ensure_ascii) {
      out.append(s.substr(start, i - start));
    } else if (cp < 0x10000) {
      std::snprintf(buf, sizeof buf, "\\u%04x", cp);
      out += buf;
    } else {
      const uint32_t v = cp - 0x10000;
      std::snprintf(buf, sizeof buf, "\\u%04x\\u%04x", 0xD800 + (v >> 10), 0xDC00 + (v & 0x3FF));
      out += buf;
    }
  }
  out += '"';
}

std::string float_json(double f) {
  if (std::isnan(f)) return "NaN";
  if (std::isinf(f)) return f < 0 ? "-Infinity" : "Infinity";
  return float_repr(f);
}

// A dict key as json.dumps converts it (str, or int/float/bool/None to their JSON text).
std::string key_text(const Value& k) {
  switch (k.type()) {
    case Value::Type::kString: return k.str();
    case Value::Type::kInt: return std::to_string(k.as_int());
    case Value::Type::kFloat: return float_json(k.as_float());
    case Value::Type::kBool: return k.as_bool() ? "true" : "false";
    case Value::Type::kNone: return "null";
    default: runtime_error("keys must be str, int, float, bool or None, not " + type_name(k));
  }
}

[[noreturn]] void not_serializable(const Value& v) {
  runtime_error("Object of type " + type_name(v) + " is not JSON serializable");
}

void dump(State& st, std::string& out, const Value& v, const JsonStyle& style, int level) {
  st.step();
  if (out.size() > st.limits().max_output_bytes) st.check_string_size(out.size());
  auto newline = [&](int lvl) {
    out += '\n';
    for (int i = 0; i < lvl; ++i) out += *style.indent;
  };
  switch (v.type()) {
    case Value::Type::kNone: out += "null"; return;
    case Value::Type::kBool: out += v.as_bool() ? "true" : "false"; return;
    case Value::Type::kInt: out += std::to_string(v.as_int()); return;
    case Value::Type::kFloat: out += float_json(v.as_float()); return;
    case Value::Type::kString: append_string(out, v.str(), style.ensure_ascii); return;
    case Value::Type::kList: {
      if (v.seq_kind() != SeqKind::kList && v.seq_kind() != SeqKind::kTuple) not_serializable(v);
      const auto& items = v.items();
      if (items.empty()) {
        out += "[]";
        return;
      }
      out += '[';
      for (size_t i = 0; i < items.size(); ++i) {
        if (i > 0) out += style.item_separator;
        if (style.indent) newline(level + 1);
        dump(st, out, items[i], style, level + 1);
      }
      if (style.indent) newline(level);
      out += ']';
      return;
    }
    case Value::Type::kDict: {
      const auto& items = v.dict_data().items;
      if (items.empty()) {
        out += "{}";
        return;
      }
      std::vector<const std::pair<Value, Value>*> order;
      order.reserve(items.size());
      for (const auto& kv : items) order.push_back(&kv);
      if (style.sort_keys)
        std::stable_sort(order.begin(), order.end(),
                         [](const auto* a, const auto* b) { return compare_values(a->first, b->first) < 0; });
      out += '{';
      bool first = true;
      for (const auto* kv : order) {
        if (!first) out += style.item_separator;
        first = false;
        if (style.indent) newline(level + 1);
        append_string(out, key_text(kv->first), style.ensure_ascii);
        out += style.key_separator;
        dump(st, out, kv->second, style, level + 1);
      }
      if (style.indent) newline(level);
      out += '}';
      return;
    }
    default: not_serializable(v);
  }
}

}  // namespace

Value from_json(const nlohmann::ordered_json& j, bool literal) { return from_json_at(j, literal, 0); }

std::string to_json(State& st, const Value& v, const JsonStyle& style) {
  std::string out;
  dump(st, out, v, style, 0);
  st.check_string_size(out.size());
  return out;
}

}  // namespace ubatch::jinja
