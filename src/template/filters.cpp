// Built-in filters (filters.h), following jinja2/filters.py 3.1 with autoescape off and
// transformers' tojson.
#include "template/filters.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "template/args.h"
#include "template/error.h"
#include "template/json.h"
#include "template/methods.h"
#include "template/objects.h"
#include "template/py_format.h"
#include "template/state.h"
#include "template/tests.h"
#include "template/unicode.h"
#include "template/value_ops.h"

namespace ubatch::jinja {

Value attribute_path(State& st, Value item, const Value& attribute) {
  if (attribute.is_int()) return get_item(st, item, attribute);
  const std::string path = to_str(attribute);
  size_t begin = 0;
  while (true) {
    const size_t dot = path.find('.', begin);
    const std::string part = path.substr(begin, dot == std::string::npos ? std::string::npos : dot - begin);
    if (!part.empty() && part.find_first_not_of("0123456789") == std::string::npos && part.size() < 18) {
      item = get_item(st, item, Value::integer(std::strtoll(part.c_str(), nullptr, 10)));
    } else {
      item = get_item(st, item, Value::data(part));
    }
    if (dot == std::string::npos) break;
    if (item.is_undefined()) fail_undefined(item);
    begin = dot + 1;
  }
  return item;
}

namespace {

Value iterator_of(std::vector<Value> items) { return Value::list(std::move(items), SeqKind::kIterator); }

// A filter that is a generator in jinja2 runs only when its result is consumed, so its errors
// (not its limits) surface there: computed now, a runtime error is kept for consumption.
template <typename Fn>
Value lazily(Fn&& compute) {
  try {
    return compute();
  } catch (TemplateException& e) {
    if (e.error().kind != ErrorKind::kRuntime) throw;
    return Value::failing_iterator(std::move(e.error().message));
  }
}

// soft_str: strings (Markup too) as they are, anything else str().
Value soft_str(const Value& v) { return v.is_string() ? v : Value::string(to_text(v)); }

Value lower_if_string(const Value& v) {
  if (!v.is_string()) return v;
  return Value::string(v.text().map_ranges([](std::string_view s) { return unicode::lower(s); }));
}

// Sorting key getter: optional attribute path(s), optional case folding.
struct KeyGetter {
  State& st;
  std::vector<Value> attributes;  // empty: the item itself
  bool case_sensitive;
  Value key(const Value& item) const {
    if (attributes.empty()) return case_sensitive ? item : lower_if_string(item);
    if (attributes.size() == 1) {
      Value k = attribute_path(st, item, attributes[0]);
      return case_sensitive ? k : lower_if_string(k);
    }
    std::vector<Value> parts;
    for (const Value& a : attributes) {
      Value k = attribute_path(st, item, a);
      parts.push_back(case_sensitive ? k : lower_if_string(k));
    }
    return Value::list(std::move(parts));
  }
};

std::vector<Value> split_attributes(const Value& attribute, bool multi) {
  if (attribute.is_none() || attribute.is_undefined()) return {};
  if (!multi || !attribute.is_string()) return {attribute};
  std::vector<Value> out;
  const std::string& s = attribute.str();
  size_t begin = 0;
  while (true) {
    const size_t comma = s.find(',', begin);
    out.push_back(Value::data(s.substr(begin, comma == std::string::npos ? std::string::npos : comma - begin)));
    if (comma == std::string::npos) break;
    begin = comma + 1;
  }
  return out;
}

void sort_values(std::vector<Value>& items, const KeyGetter& g, bool reverse) {
  std::vector<std::pair<Value, size_t>> keyed;
  keyed.reserve(items.size());
  for (size_t i = 0; i < items.size(); ++i) keyed.emplace_back(g.key(items[i]), i);
  std::stable_sort(keyed.begin(), keyed.end(), [&](const auto& a, const auto& b) {
    return reverse ? compare_values(b.first, a.first) < 0 : compare_values(a.first, b.first) < 0;
  });
  std::vector<Value> out;
  out.reserve(items.size());
  for (const auto& k : keyed) out.push_back(items[k.second]);
  items = std::move(out);
}

bool bool_arg(const ArgBinder& a, size_t i) { return a.has(i) && truthy(a.get(i)); }

// --- filters ---------------------------------------------------------------------------

Value f_abs(State&, const Value& v, CallArgs& args) {
  no_args("abs", args);
  if (v.is_float()) return Value::number(std::fabs(v.as_float()));
  if (v.is_int() || v.is_bool()) {
    if (v.to_int() == INT64_MIN) runtime_error("integer overflow (ints are 64-bit here)");
    return Value::integer(v.to_int() < 0 ? -v.to_int() : v.to_int());
  }
  if (v.is_undefined()) fail_undefined(v);
  runtime_error("bad operand type for abs(): '" + type_name(v) + "'");
}

Value f_attr(State& st, const Value& v, CallArgs& args) {
  ArgBinder a("attr", args, {"name"}, 1);
  const std::string name = to_str(a.get(0));
  if (v.is_undefined()) fail_undefined(v);
  if (name.size() >= 2 && name.substr(0, 2) == "__") return get_attr(st, v, name);
  if (v.is_object()) return v.obj().attribute(st, name);
  if (auto m = find_method(v, name)) return *m;
  return Value::undefined("'" + type_name(v) + " object' has no attribute '" + name + "'");
}

Value f_batch_now(State& st, const Value& v, CallArgs& args) {
  ArgBinder a("batch", args, {"linecount", "fill_with"}, 1);
  if (!a.get(0).is_int() || a.get(0).as_int() <= 0) runtime_error("batch() linecount must be a positive int");
  const size_t n = static_cast<size_t>(a.get(0).as_int());
  std::vector<Value> out, row;
  for (Value& item : iterate(st, v)) {
    if (row.size() == n) {
      out.push_back(Value::list(std::move(row)));
      row.clear();
    }
    row.push_back(std::move(item));
  }
  if (!row.empty()) {
    if (a.has_value(1)) {
      st.check_list_size(n);
      while (row.size() < n) row.push_back(a.get(1));
    }
    out.push_back(Value::list(std::move(row)));
  }
  return iterator_of(std::move(out));
}
Value f_batch(State& st, const Value& v, CallArgs& args) {
  return lazily([&] { return f_batch_now(st, v, args); });
}

Value f_slice_now(State& st, const Value& v, CallArgs& args) {
  ArgBinder a("slice", args, {"slices", "fill_with"}, 1);
  if (!a.get(0).is_int() || a.get(0).as_int() <= 0) runtime_error("slice() slices must be a positive int");
  const std::vector<Value> seq = iterate(st, v);
  const size_t slices = static_cast<size_t>(a.get(0).as_int());
  st.check_list_size(slices);
  const size_t per = seq.size() / slices, extra = seq.size() % slices;
  std::vector<Value> out;
  size_t offset = 0;
  for (size_t s = 0; s < slices; ++s) {
    const size_t start = offset + s * per;
    if (s < extra) ++offset;
    const size_t end = offset + (s + 1) * per;
    std::vector<Value> part(seq.begin() + static_cast<std::ptrdiff_t>(start), seq.begin() + static_cast<std::ptrdiff_t>(end));
    if (a.has_value(1) && s >= extra) part.push_back(a.get(1));
    out.push_back(Value::list(std::move(part)));
  }
  return iterator_of(std::move(out));
}
Value f_slice(State& st, const Value& v, CallArgs& args) {
  return lazily([&] { return f_slice_now(st, v, args); });
}

Value f_capitalize(State&, const Value& v, CallArgs& args) {
  no_args("capitalize", args);
  const Value s = soft_str(v);
  return Value::string(MarkedText(capitalize(s.str()), s.text().all_literal()), s.is_safe());
}

Value f_title(State&, const Value& v, CallArgs& args) {
  no_args("title", args);
  // jinja2's do_title: words begin after runs of "-", whitespace, "(", "{", "[", "<".
  const Value s = soft_str(v);
  const std::string& in = s.str();
  std::string out;
  bool word_start = true;
  for (size_t i = 0; i < in.size();) {
    const uint32_t cp = unicode::next(in, i);
    const bool sep = cp == '-' || cp == '(' || cp == '{' || cp == '[' || cp == '<' || unicode::is_space(cp);
    if (sep) {
      unicode::append(out, cp);
      word_start = true;
    } else {
      std::string c;
      unicode::append(c, cp);
      out += word_start ? unicode::upper(c) : unicode::lower(c);  // "ß".upper() is "SS"
      word_start = false;
    }
  }
  return Value::string(MarkedText(out, s.text().all_literal()));
}

Value f_upper(State&, const Value& v, CallArgs& args) {
  no_args("upper", args);
  const Value s = soft_str(v);
  return Value::string(s.text().map_ranges([](std::string_view x) { return unicode::upper(x); }), s.is_safe());
}

Value f_lower(State&, const Value& v, CallArgs& args) {
  no_args("lower", args);
  const Value s = soft_str(v);
  return Value::string(s.text().map_ranges([](std::string_view x) { return unicode::lower(x); }), s.is_safe());
}

Value f_center(State& st, const Value& v, CallArgs& args) {
  ArgBinder a("center", args, {"width"});
  CallArgs inner;
  inner.positional.push_back(a.get_or(0, Value::integer(80)));
  return find_method(soft_str(v), "center")->obj().call(st, inner);
}

Value f_length(State&, const Value& v, CallArgs& args) {
  no_args("length", args);
  return Value::integer(length(v));
}

Value f_default(State&, const Value& v, CallArgs& args) {
  ArgBinder a("default", args, {"default_value", "boolean"});
  if (v.is_undefined() || (bool_arg(a, 1) && !truthy(v))) return a.get_or(0, Value::literal(""));
  return v;
}

Value f_dictsort(State& st, const Value& v, CallArgs& args) {
  ArgBinder a("dictsort", args, {"case_sensitive", "by", "reverse"});
  if (!v.is_dict()) runtime_error("'" + type_name(v) + "' object has no attribute 'items'");
  size_t pos = 0;
  if (a.has(1)) {
    const std::string by = to_str(a.get(1));
    if (by == "value") {
      pos = 1;
    } else if (by != "key") {
      runtime_error("You can only sort by either \"key\" or \"value\"");
    }
  }
  std::vector<Value> items;
  for (const auto& [k, val] : v.dict_data().items) items.push_back(Value::list({k, val}, SeqKind::kTuple));
  KeyGetter g{st, {Value::integer(static_cast<int64_t>(pos))}, bool_arg(a, 0)};
  sort_values(items, g, bool_arg(a, 2));
  return Value::list(std::move(items));
}

Value f_escape(State&, const Value& v, CallArgs& args) {
  no_args("escape", args);
  return Value::string(escape_value(v), true);
}

Value f_forceescape(State&, const Value& v, CallArgs& args) {
  no_args("forceescape", args);
  return Value::string(to_text(v).map_ranges([](std::string_view s) { return html_escape(s); }), true);
}

Value f_safe(State&, const Value& v, CallArgs& args) {
  no_args("safe", args);
  return Value::string(to_text(v), true);
}

Value f_string(State&, const Value& v, CallArgs& args) {
  no_args("string", args);
  return soft_str(v);
}

Value f_first(State& st, const Value& v, CallArgs& args) {
  no_args("first", args);
  if (v.is_iterator()) {
    const ListData& d = v.list_data();
    if (d.next < d.items.size()) return d.items[d.next++];
    return Value::undefined("No first item, sequence was empty.");
  }
  if (v.is_list() && !v.items().empty()) return v.items().front();
  if (v.is_list()) return Value::undefined("No first item, sequence was empty.");
  std::vector<Value> items = iterate(st, v);
  if (items.empty()) return Value::undefined("No first item, sequence was empty.");
  return items.front();
}

Value f_last(State& st, const Value& v, CallArgs& args) {
  no_args("last", args);
  if (v.is_iterator()) runtime_error("'generator' object is not reversible");
  std::vector<Value> items = iterate(st, v);
  if (items.empty()) return Value::undefined("No last item, sequence was empty.");
  return items.back();
}

// Python float(str): surrounding whitespace, "_" between digits, inf/nan spellings.
bool parse_py_float(const std::string& in, double& out) {
  const size_t b = in.find_first_not_of(" \t\n\r\f\v");
  const size_t e = in.find_last_not_of(" \t\n\r\f\v");
  if (b == std::string::npos) return false;
  const std::string s = in.substr(b, e - b + 1);
  std::string clean;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '_' && i > 0 && i + 1 < s.size() && std::isdigit(static_cast<unsigned char>(s[i - 1])) &&
        std::isdigit(static_cast<unsigned char>(s[i + 1])))
      continue;
    clean += s[i];
  }
  const std::string lowered = unicode::lower(clean);
  const bool neg = lowered[0] == '-';
  const std::string_view body = std::string_view(lowered).substr(lowered[0] == '+' || neg ? 1 : 0);
  if (body == "inf" || body == "infinity") {
    out = neg ? -INFINITY : INFINITY;
    return true;
  }
  if (body == "nan") {
    out = NAN;
    return true;
  }
  if (body.empty() || clean.find_first_not_of("0123456789+-.eE") != std::string::npos) return false;
  char* end = nullptr;
  out = std::strtod(clean.c_str(), &end);
  return end == clean.c_str() + clean.size();
}

Value f_float(State&, const Value& v, CallArgs& args) {
  ArgBinder a("float", args, {"default"});
  if (v.is_undefined()) fail_undefined(v);  // float(Undefined) raises, not a ValueError
  if (v.is_number()) return Value::number(v.to_float());
  double d;
  if (v.is_string() && parse_py_float(v.str(), d)) return Value::number(d);
  return a.get_or(0, Value::number(0.0));
}

// Python int(str, base) (whitespace, sign, "_" separators, 0x/0o/0b prefixes with base 0/16/8/2).
bool parse_py_int(std::string s, int base, int64_t& out) {
  const size_t b = s.find_first_not_of(" \t\n\r\f\v");
  const size_t e = s.find_last_not_of(" \t\n\r\f\v");
  if (b == std::string::npos) return false;
  s = s.substr(b, e - b + 1);
  bool neg = false;
  size_t i = 0;
  if (s[i] == '+' || s[i] == '-') neg = s[i++] == '-';
  auto prefix = [&](char p) {
    return i + 1 < s.size() && s[i] == '0' && (s[i + 1] == p || s[i + 1] == std::toupper(p));
  };
  if ((base == 16 || base == 0) && prefix('x')) {
    base = 16;
    i += 2;
  } else if ((base == 8 || base == 0) && prefix('o')) {
    base = 8;
    i += 2;
  } else if ((base == 2 || base == 0) && prefix('b')) {
    base = 2;
    i += 2;
  } else if (base == 0) {
    base = 10;
  }
  if (base < 2 || base > 36 || i >= s.size()) return false;
  unsigned __int128 acc = 0;
  bool digit_seen = false;
  for (; i < s.size(); ++i) {
    const char c = s[i];
    if (c == '_' && digit_seen && i + 1 < s.size() && s[i + 1] != '_') continue;
    int d;
    if (c >= '0' && c <= '9') {
      d = c - '0';
    } else if (c >= 'a' && c <= 'z') {
      d = c - 'a' + 10;
    } else if (c >= 'A' && c <= 'Z') {
      d = c - 'A' + 10;
    } else {
      return false;
    }
    if (d >= base) return false;
    acc = acc * static_cast<unsigned>(base) + static_cast<unsigned>(d);
    if (acc > static_cast<unsigned __int128>(INT64_MAX) + 1) return false;
    digit_seen = true;
  }
  if (!digit_seen) return false;
  if (!neg && acc > static_cast<unsigned __int128>(INT64_MAX)) return false;
  out = neg ? static_cast<int64_t>(0 - static_cast<uint64_t>(acc)) : static_cast<int64_t>(acc);
  return true;
}

Value f_int(State&, const Value& v, CallArgs& args) {
  ArgBinder a("int", args, {"default", "base"});
  const Value def = a.get_or(0, Value::integer(0));
  auto from_float = [&](double f) {
    if (!std::isfinite(f) || std::fabs(f) >= 9.2e18) return def;
    return Value::integer(static_cast<int64_t>(f));
  };
  if (v.is_undefined()) fail_undefined(v);  // int(Undefined) raises, not a ValueError
  if (v.is_int() || v.is_bool()) return Value::integer(v.to_int());
  if (v.is_float()) return from_float(v.as_float());
  if (v.is_string()) {
    int64_t out;
    const int base = a.has(1) && a.get(1).is_int() ? static_cast<int>(a.get(1).as_int()) : 10;
    if (parse_py_int(v.str(), base, out)) return Value::integer(out);
    double d;
    if (parse_py_float(v.str(), d)) return from_float(d);  // "42.23"|int gives 42
  }
  return def;
}

Value f_round(State&, const Value& v, CallArgs& args) {
  ArgBinder a("round", args, {"precision", "method"});
  if (!v.is_number()) {
    if (v.is_undefined()) fail_undefined(v);
    runtime_error("type " + type_name(v) + " doesn't define __round__ method");
  }
  const int64_t precision = a.has(0) ? a.get(0).to_int() : 0;
  const std::string method = a.has(1) ? to_str(a.get(1)) : "common";
  if (method != "common" && method != "ceil" && method != "floor")
    runtime_error("method must be common, ceil or floor");
  if (method == "common") {
    if (!v.is_float()) return Value::integer(v.to_int());  // round(int, n) stays an int
    const double f = v.as_float();
    if (!std::isfinite(f)) return v;
    if (precision < -300 || precision > 300) return v;
    if (precision <= 0) {
      const double scale = std::pow(10.0, static_cast<double>(-precision));
      return Value::number(std::nearbyint(f / scale) * scale);
    }
    char buf[512];
    std::snprintf(buf, sizeof buf, "%.*f", static_cast<int>(precision), f);
    return Value::number(std::strtod(buf, nullptr));
  }
  const double scale = std::pow(10.0, static_cast<double>(precision));
  const double x = v.to_float() * scale;
  return Value::number((method == "ceil" ? std::ceil(x) : std::floor(x)) / scale);
}

Value f_format(State& st, const Value& v, CallArgs& args) {
  if (!args.positional.empty() && !args.keyword.empty())
    runtime_error("can't handle positional and keyword arguments at the same time");
  Value fmt_args;
  if (!args.keyword.empty()) {
    std::vector<std::pair<Value, Value>> kw;
    for (auto& [k, val] : args.keyword) kw.emplace_back(Value::literal(k), val);
    fmt_args = Value::dict(std::move(kw));
  } else {
    fmt_args = Value::list(args.positional, SeqKind::kTuple);
  }
  const Value s = soft_str(v);
  return Value::string(percent_format(st, s.text(), fmt_args), s.is_safe());
}

Value f_indent(State& st, const Value& v, CallArgs& args) {
  ArgBinder a("indent", args, {"width", "first", "blank"});
  std::string indention = "    ";
  bool indention_literal = false;  // the filter's own spaces are not template text
  if (a.has(0)) {
    if (a.get(0).is_string()) {
      indention = a.get(0).str();
      indention_literal = a.get(0).text().all_literal();
    } else if (a.get(0).is_int()) {
      const int64_t w = a.get(0).as_int();
      st.check_string_size(w > 0 ? static_cast<size_t>(w) : 0);
      indention = std::string(w > 0 ? static_cast<size_t>(w) : 0, ' ');
    } else {
      runtime_error("indent() width must be an int or a string");
    }
  }
  const MarkedText ind(indention, indention_literal);
  if (v.is_undefined()) fail_undefined(v);
  if (!v.is_string()) runtime_error("indent expects a string, not " + type_name(v));
  const Value& s = v;
  // s + "\n", then splitlines(): the lines with their marks.
  MarkedText text = s.text();
  text.append("\n", false);
  CallArgs none;
  const Value lines_v = find_method(Value::string(text), "splitlines")->obj().call(st, none);
  const std::vector<Value>& lines = lines_v.items();
  MarkedText out;
  const bool blank = bool_arg(a, 2);
  for (size_t i = 0; i < lines.size(); ++i) {
    if (i > 0) {
      out.append("\n", false);
      if (blank || !lines[i].str().empty()) out.append(ind);
    }
    out.append(lines[i].text());
    st.check_string_size(out.size());
  }
  if (bool_arg(a, 1)) {
    MarkedText first = ind;
    first.append(out);
    out = std::move(first);
  }
  return Value::string(std::move(out), s.is_safe());
}

Value f_items_now(State&, const Value& v, CallArgs& args) {
  no_args("items", args);
  if (v.is_undefined()) return iterator_of({});
  if (!v.is_dict()) runtime_error("Can only get item pairs from a mapping.");
  std::vector<Value> out;
  for (const auto& [k, val] : v.dict_data().items) out.push_back(Value::list({k, val}, SeqKind::kTuple));
  return iterator_of(std::move(out));
}
Value f_items(State& st, const Value& v, CallArgs& args) {
  return lazily([&] { return f_items_now(st, v, args); });
}

Value f_join(State& st, const Value& v, CallArgs& args) {
  ArgBinder a("join", args, {"d", "attribute"});
  const MarkedText sep = a.has(0) ? to_text(a.get(0)) : MarkedText();
  std::vector<Value> items = iterate(st, v);
  MarkedText out;
  for (size_t i = 0; i < items.size(); ++i) {
    if (i > 0) out.append(sep);
    out.append(to_text(a.has_value(1) ? attribute_path(st, items[i], a.get(1)) : items[i]));
    st.check_string_size(out.size());
  }
  return Value::string(std::move(out));
}

Value f_list(State& st, const Value& v, CallArgs& args) {
  no_args("list", args);
  return Value::list(iterate(st, v));
}

Value f_map_now(State& st, const Value& v, CallArgs& args) {
  if (!truthy(v)) return iterator_of({});
  std::vector<Value> items = iterate(st, v);
  std::vector<Value> out;
  out.reserve(items.size());
  if (args.positional.empty()) {
    // map(attribute="x", default=y)
    Value attribute, def;
    bool has_attribute = false;
    for (auto& [k, val] : args.keyword) {
      if (k == "attribute") {
        attribute = val;
        has_attribute = true;
      } else if (k == "default") {
        def = val;
      } else {
        runtime_error("Unexpected keyword argument '" + k + "'");
      }
    }
    if (!has_attribute) runtime_error("map requires a filter argument");
    for (const Value& item : items) {
      Value r = attribute_path(st, item, attribute);
      if (r.is_undefined() && !def.is_undefined() && !def.is_none()) r = def;
      out.push_back(std::move(r));
    }
    return iterator_of(std::move(out));
  }
  const std::string name = to_str(args.positional[0]);
  const FilterFn fn = find_filter(name);
  if (!fn) runtime_error("No filter named '" + name + "'.");
  CallArgs rest;
  rest.positional.assign(args.positional.begin() + 1, args.positional.end());
  rest.keyword = args.keyword;
  for (const Value& item : items) {
    st.step();
    CallArgs call = rest;
    out.push_back(fn(st, item, call));
  }
  return iterator_of(std::move(out));
}
Value f_map(State& st, const Value& v, CallArgs& args) {
  return lazily([&] { return f_map_now(st, v, args); });
}

// select/reject/selectattr/rejectattr.
Value select_impl_now(State& st, const Value& v, CallArgs& args, bool lookup_attr, bool keep_when) {
  if (!truthy(v)) return iterator_of({});
  size_t off = 0;
  Value attribute;
  if (lookup_attr) {
    if (args.positional.empty()) runtime_error("Missing parameter for attribute name");
    attribute = args.positional[0];
    off = 1;
  }
  TestFn test = nullptr;
  CallArgs test_args;
  if (args.positional.size() > off) {
    const std::string name = to_str(args.positional[off]);
    test = find_test(name);
    if (!test) runtime_error("No test named '" + name + "'.");
    test_args.positional.assign(args.positional.begin() + static_cast<std::ptrdiff_t>(off) + 1, args.positional.end());
    test_args.keyword = args.keyword;
  }
  std::vector<Value> out;
  for (Value& item : iterate(st, v)) {
    st.step();
    const Value subject = lookup_attr ? attribute_path(st, item, attribute) : item;
    bool r;
    if (test) {
      CallArgs call = test_args;
      r = test(st, subject, call);
    } else {
      r = truthy(subject);
    }
    if (r == keep_when) out.push_back(std::move(item));
  }
  return iterator_of(std::move(out));
}
Value select_impl(State& st, const Value& v, CallArgs& args, bool lookup_attr, bool keep_when) {
  return lazily([&] { return select_impl_now(st, v, args, lookup_attr, keep_when); });
}
Value f_select(State& st, const Value& v, CallArgs& a) { return select_impl(st, v, a, false, true); }
Value f_reject(State& st, const Value& v, CallArgs& a) { return select_impl(st, v, a, false, false); }
Value f_selectattr(State& st, const Value& v, CallArgs& a) { return select_impl(st, v, a, true, true); }
Value f_rejectattr(State& st, const Value& v, CallArgs& a) { return select_impl(st, v, a, true, false); }

Value min_max(State& st, const Value& v, CallArgs& args, const char* fn, bool want_max) {
  ArgBinder a(fn, args, {"case_sensitive", "attribute"});
  std::vector<Value> items = iterate(st, v);
  if (items.empty()) return Value::undefined("No aggregated item, sequence was empty.");
  KeyGetter g{st, split_attributes(a.get_or(1, Value::none()), false), bool_arg(a, 0)};
  size_t best = 0;
  Value best_key = g.key(items[0]);
  for (size_t i = 1; i < items.size(); ++i) {
    Value k = g.key(items[i]);
    const int c = compare_values(k, best_key);
    if (want_max ? c > 0 && c != 2 : c < 0) {
      best = i;
      best_key = std::move(k);
    }
  }
  return items[best];
}
Value f_min(State& st, const Value& v, CallArgs& a) { return min_max(st, v, a, "min", false); }
Value f_max(State& st, const Value& v, CallArgs& a) { return min_max(st, v, a, "max", true); }

// pprint.pformat without line wrapping: repr with dict keys sorted (sort_dicts=True).
std::string sorted_repr(const Value& v) {
  if (v.is_dict()) {
    std::vector<const std::pair<Value, Value>*> items;
    for (const auto& kv : v.dict_data().items) items.push_back(&kv);
    std::stable_sort(items.begin(), items.end(),
                     [](const auto* a, const auto* b) { return compare_values(a->first, b->first) < 0; });
    std::string out = "{";
    for (size_t i = 0; i < items.size(); ++i) {
      if (i > 0) out += ", ";
      out += sorted_repr(items[i]->first) + ": " + sorted_repr(items[i]->second);
    }
    return out + "}";
  }
  if (v.is_list() && (v.seq_kind() == SeqKind::kList || v.seq_kind() == SeqKind::kTuple)) {
    std::string out = v.seq_kind() == SeqKind::kList ? "[" : "(";
    const auto& items = v.items();
    for (size_t i = 0; i < items.size(); ++i) {
      if (i > 0) out += ", ";
      out += sorted_repr(items[i]);
    }
    if (v.seq_kind() == SeqKind::kTuple && items.size() == 1) out += ",";
    return out + (v.seq_kind() == SeqKind::kList ? "]" : ")");
  }
  return repr(v);
}

Value f_pprint(State&, const Value& v, CallArgs& args) {
  no_args("pprint", args);
  return Value::data(sorted_repr(v));
}

Value f_replace(State& st, const Value& v, CallArgs& args) {
  ArgBinder a("replace", args, {"old", "new", "count"}, 2);
  const MarkedText s = to_text(v);
  const MarkedText old_t = to_text(a.get(0));
  const MarkedText new_t = to_text(a.get(1));
  const size_t n_old = std::max<size_t>(old_t.size(), 1);
  st.check_string_size(s.size() + (s.size() / n_old + 1) * new_t.size());
  const int64_t count = a.has_value(2) ? a.get(2).to_int() : -1;
  return Value::string(replace_text(s, old_t, new_t, count));
}

Value f_reverse(State& st, const Value& v, CallArgs& args) {
  no_args("reverse", args);
  if (v.is_string()) {
    const std::string& s = v.str();
    MarkedText out;
    size_t end = s.size();
    while (end > 0) {
      size_t b = end - 1;
      while (b > 0 && (static_cast<unsigned char>(s[b]) & 0xC0) == 0x80) --b;
      out.append_range(v.text(), b, end);
      end = b;
    }
    return Value::string(std::move(out), v.is_safe());
  }
  const bool was_iterator = v.is_iterator();
  std::vector<Value> items = iterate(st, v);
  std::reverse(items.begin(), items.end());
  // reversed() of a sequence is an iterator; a generator is listed first (jinja2's fallback).
  return was_iterator ? Value::list(std::move(items)) : iterator_of(std::move(items));
}

Value f_sort(State& st, const Value& v, CallArgs& args) {
  ArgBinder a("sort", args, {"reverse", "case_sensitive", "attribute"});
  std::vector<Value> items = iterate(st, v);
  KeyGetter g{st, split_attributes(a.get_or(2, Value::none()), true), bool_arg(a, 1)};
  sort_values(items, g, bool_arg(a, 0));
  return Value::list(std::move(items));
}

Value f_striptags(State&, const Value& v, CallArgs& args) {
  no_args("striptags", args);
  const std::string s = to_str(v);
  std::string no_tags;
  for (size_t i = 0; i < s.size();) {
    if (s.compare(i, 4, "<!--") == 0) {
      const size_t e = s.find("-->", i + 4);
      if (e == std::string::npos) {
        no_tags += s.substr(i);
        break;
      }
      i = e + 3;
      continue;
    }
    if (s[i] == '<') {
      const size_t e = s.find('>', i + 1);
      if (e != std::string::npos) {
        i = e + 1;
        continue;
      }
    }
    no_tags += s[i++];
  }
  // Collapse whitespace to single spaces, then unescape the HTML entities markupsafe knows.
  std::string collapsed;
  bool pending_space = false;
  for (size_t i = 0; i < no_tags.size();) {
    const size_t start = i;
    const uint32_t cp = unicode::next(no_tags, i);
    if (unicode::is_space(cp)) {
      pending_space = !collapsed.empty();
      continue;
    }
    if (pending_space) collapsed += ' ';
    pending_space = false;
    collapsed.append(no_tags, start, i - start);
  }
  std::string out;
  for (size_t i = 0; i < collapsed.size(); ++i) {
    static const std::pair<std::string_view, char> kEntities[] = {
        {"&amp;", '&'}, {"&lt;", '<'}, {"&gt;", '>'}, {"&quot;", '"'}, {"&#34;", '"'}, {"&#39;", '\''}, {"&apos;", '\''}};
    bool done = false;
    for (const auto& [ent, ch] : kEntities)
      if (collapsed.compare(i, ent.size(), ent) == 0) {
        out += ch;
        i += ent.size() - 1;
        done = true;
        break;
      }
    if (!done) out += collapsed[i];
  }
  return Value::string(MarkedText(out, all_literal(v)));
}

Value f_sum(State& st, const Value& v, CallArgs& args) {
  ArgBinder a("sum", args, {"attribute", "start"});
  Value total = a.get_or(1, Value::integer(0));
  for (const Value& item : iterate(st, v)) {
    st.step();
    total = binary_op(st, BinOp::kAdd, total, a.has_value(0) ? attribute_path(st, item, a.get(0)) : item);
  }
  return total;
}

Value f_tojson(State& st, const Value& v, CallArgs& args) {
  // transformers: tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False)
  ArgBinder a("tojson", args, {"ensure_ascii", "indent", "separators", "sort_keys"});
  JsonStyle style;
  style.ensure_ascii = bool_arg(a, 0);
  style.sort_keys = bool_arg(a, 3);
  if (a.has_value(1)) {
    const Value& ind = a.get(1);
    if (ind.is_string()) {
      style.indent = ind.str();
    } else if (ind.is_int() || ind.is_bool()) {
      const int64_t n = ind.to_int();
      if (n > 1000) runtime_error("tojson indent too large");
      style.indent = std::string(n > 0 ? static_cast<size_t>(n) : 0, ' ');
    } else {
      runtime_error("tojson indent must be an int or a string, not " + type_name(ind));
    }
    style.item_separator = ",";
  }
  if (a.has_value(2)) {
    const std::vector<Value> seps = iterate(st, a.get(2));
    if (seps.size() != 2 || !seps[0].is_string() || !seps[1].is_string())
      runtime_error("tojson separators must be a pair of strings");
    style.item_separator = seps[0].str();
    style.key_separator = seps[1].str();
  }
  return Value::data(to_json(st, v, style));
}

Value f_trim(State&, const Value& v, CallArgs& args) {
  ArgBinder a("trim", args, {"chars"});
  const Value s = soft_str(v);
  const std::string* chars = nullptr;
  std::string chars_s;
  if (a.has_value(0)) {
    chars_s = to_str(a.get(0));
    chars = &chars_s;
  }
  return Value::string(strip_text(s.text(), chars, true, true), s.is_safe());
}

Value f_truncate(State&, const Value& v, CallArgs& args) {
  ArgBinder a("truncate", args, {"length", "killwords", "end", "leeway"});
  if (v.is_undefined()) return v;  // len(Undefined) is 0
  if (!v.is_string()) {
    // jinja2 measures with len() and slices only when too long: other sequences pass unchanged
    // when short enough, and fail (slice + str) when not.
    if (length(v) <= (a.has(0) ? a.get(0).to_int() : 255) + (a.has_value(3) ? a.get(3).to_int() : 5)) return v;
    runtime_error("can only concatenate " + type_name(v) + " (not \"str\") to " + type_name(v));
  }
  const Value& s = v;
  const int64_t len = a.has(0) ? a.get(0).to_int() : 255;
  const MarkedText end = a.has(2) ? to_text(a.get(2)) : MarkedText::data("...");
  const int64_t leeway = a.has_value(3) ? a.get(3).to_int() : 5;
  const int64_t end_len = static_cast<int64_t>(unicode::length(end.str()));
  if (len < end_len) runtime_error("expected length >= " + std::to_string(end_len) + ", got " + std::to_string(len));
  if (leeway < 0) runtime_error("expected leeway >= 0, got " + std::to_string(leeway));
  const std::string& str = s.str();
  if (static_cast<int64_t>(unicode::length(str)) <= len + leeway) return s;
  MarkedText head = s.text().substr(0, unicode::byte_offset(str, static_cast<size_t>(len - end_len)));
  if (!bool_arg(a, 1)) {
    const size_t sp = head.str().rfind(' ');
    if (sp != std::string::npos) head = head.substr(0, sp);
  }
  head.append(end);
  return Value::string(std::move(head));
}

Value f_unique_now(State& st, const Value& v, CallArgs& args) {
  ArgBinder a("unique", args, {"case_sensitive", "attribute"});
  KeyGetter g{st, split_attributes(a.get_or(1, Value::none()), false), bool_arg(a, 0)};
  std::vector<Value> seen, out;
  for (Value& item : iterate(st, v)) {
    Value k = g.key(item);
    if (k.is_list() || k.is_dict()) runtime_error("unhashable type: '" + type_name(k) + "'");
    bool dup = false;
    for (const Value& s : seen) {
      st.step();
      if (values_equal(s, k)) {
        dup = true;
        break;
      }
    }
    if (!dup) {
      seen.push_back(std::move(k));
      out.push_back(std::move(item));
    }
  }
  return iterator_of(std::move(out));
}
Value f_unique(State& st, const Value& v, CallArgs& args) {
  return lazily([&] { return f_unique_now(st, v, args); });
}

Value f_wordcount(State&, const Value& v, CallArgs& args) {
  no_args("wordcount", args);
  const std::string s = to_str(v);
  int64_t n = 0;
  bool in_word = false;
  for (size_t i = 0; i < s.size();) {
    const uint32_t cp = unicode::next(s, i);
    const bool w = unicode::is_alnum(cp) || cp == '_';
    if (w && !in_word) ++n;
    in_word = w;
  }
  return Value::integer(n);
}

struct FilterDef {
  std::string_view name;
  FilterFn fn;
};

constexpr FilterDef kFilters[] = {
    {"abs", f_abs},
    {"attr", f_attr},
    {"batch", f_batch},
    {"capitalize", f_capitalize},
    {"center", f_center},
    {"count", f_length},
    {"d", f_default},
    {"default", f_default},
    {"dictsort", f_dictsort},
    {"e", f_escape},
    {"escape", f_escape},
    {"first", f_first},
    {"float", f_float},
    {"forceescape", f_forceescape},
    {"format", f_format},
    {"indent", f_indent},
    {"int", f_int},
    {"items", f_items},
    {"join", f_join},
    {"last", f_last},
    {"length", f_length},
    {"list", f_list},
    {"lower", f_lower},
    {"map", f_map},
    {"max", f_max},
    {"min", f_min},
    {"pprint", f_pprint},
    {"reject", f_reject},
    {"rejectattr", f_rejectattr},
    {"replace", f_replace},
    {"reverse", f_reverse},
    {"round", f_round},
    {"safe", f_safe},
    {"select", f_select},
    {"selectattr", f_selectattr},
    {"slice", f_slice},
    {"sort", f_sort},
    {"string", f_string},
    {"striptags", f_striptags},
    {"sum", f_sum},
    {"title", f_title},
    {"tojson", f_tojson},
    {"trim", f_trim},
    {"truncate", f_truncate},
    {"unique", f_unique},
    {"upper", f_upper},
    {"wordcount", f_wordcount},
};

}  // namespace

FilterFn find_filter(std::string_view name) {
  for (const FilterDef& f : kFilters)
    if (f.name == name) return f.fn;
  return nullptr;
}

}  // namespace ubatch::jinja
