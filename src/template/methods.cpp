// str, dict and list methods (methods.h): one small function per method, in tables by type.
#include "template/methods.h"

#include <algorithm>
#include <memory>

#include "template/args.h"
#include "template/error.h"
#include "template/objects.h"
#include "template/py_format.h"
#include "template/state.h"
#include "template/unicode.h"
#include "template/value_ops.h"

namespace ubatch::jinja {

namespace {

// Start of the code point that ends at byte `e` (e > 0).
size_t prev_start(const std::string& s, size_t e) {
  size_t b = e - 1;
  while (b > 0 && (static_cast<unsigned char>(s[b]) & 0xC0) == 0x80) --b;
  return b;
}

const std::string* opt_string(const ArgBinder& a, size_t i, std::string_view fn) {
  if (!a.has_value(i)) return nullptr;
  if (!a.get(i).is_string()) runtime_error(std::string(fn) + " arg must be None or str");
  return &a.get(i).str();
}

int64_t opt_int(const ArgBinder& a, size_t i, int64_t def) {
  if (!a.has_value(i)) return def;
  if (!a.get(i).is_int() && !a.get(i).is_bool())
    runtime_error("'" + type_name(a.get(i)) + "' object cannot be interpreted as an integer");
  return a.get(i).to_int();
}

const Value& str_arg(const ArgBinder& a, size_t i, std::string_view fn) {
  if (!a.get(i).is_string()) {
    if (a.get(i).is_undefined() && a.has(i)) fail_undefined(a.get(i));
    runtime_error(std::string(fn) + "() argument must be str, not " + type_name(a.get(i)));
  }
  return a.get(i);
}

Value str_result(MarkedText t, const Value& self) { return Value::string(std::move(t), self.is_safe()); }

// --- str -------------------------------------------------------------------------------

Value m_strip_impl(const Value& self, CallArgs& args, const char* fn, bool left, bool right) {
  ArgBinder a(fn, args, {"chars"});
  return str_result(strip_text(self.text(), opt_string(a, 0, fn), left, right), self);
}
Value m_strip(State&, const Value& self, CallArgs& args) { return m_strip_impl(self, args, "strip", true, true); }
Value m_lstrip(State&, const Value& self, CallArgs& args) { return m_strip_impl(self, args, "lstrip", true, false); }
Value m_rstrip(State&, const Value& self, CallArgs& args) { return m_strip_impl(self, args, "rstrip", false, true); }

Value m_split_impl(State& st, const Value& self, CallArgs& args, const char* fn, bool right) {
  ArgBinder a(fn, args, {"sep", "maxsplit"});
  const std::string* sep = opt_string(a, 0, fn);
  if (sep && sep->empty()) runtime_error("empty separator");
  std::vector<Value> parts = split_text(self, sep, opt_int(a, 1, -1), right);
  st.check_list_size(parts.size());
  return Value::list(std::move(parts));
}
Value m_split(State& st, const Value& self, CallArgs& args) { return m_split_impl(st, self, args, "split", false); }
Value m_rsplit(State& st, const Value& self, CallArgs& args) { return m_split_impl(st, self, args, "rsplit", true); }

Value m_splitlines(State& st, const Value& self, CallArgs& args) {
  ArgBinder a("splitlines", args, {"keepends"});
  const bool keep = truthy(a.get(0));
  const std::string& s = self.str();
  std::vector<Value> out;
  size_t begin = 0;
  for (size_t i = 0; i < s.size();) {
    const size_t start = i;
    const uint32_t cp = unicode::next(s, i);
    const bool brk = cp == '\n' || cp == '\r' || cp == 0x0B || cp == 0x0C || cp == 0x1C || cp == 0x1D || cp == 0x1E ||
                     cp == 0x85 || cp == 0x2028 || cp == 0x2029;
    if (!brk) continue;
    if (cp == '\r' && i < s.size() && s[i] == '\n') ++i;
    out.push_back(str_result(self.text().substr(begin, keep ? i : start), self));
    begin = i;
  }
  if (begin < s.size()) out.push_back(str_result(self.text().substr(begin, s.size()), self));
  st.check_list_size(out.size());
  return Value::list(std::move(out));
}

// startswith/endswith(prefix or tuple, start=None, end=None)
Value m_affix(const Value& self, CallArgs& args, const char* fn, bool at_start) {
  ArgBinder a(fn, args, {"prefix", "start", "end"}, 1);
  const std::string& full = self.str();
  const int64_t n = static_cast<int64_t>(unicode::length(full));
  auto clamp = [&](int64_t v) {
    if (v < 0) v += n;
    return std::clamp<int64_t>(v, 0, n);
  };
  const int64_t start = clamp(opt_int(a, 1, 0));
  const int64_t end = a.has_value(2) ? clamp(opt_int(a, 2, n)) : n;
  if (start > end) return Value::boolean(false);
  const size_t b = unicode::byte_offset(full, static_cast<size_t>(start));
  const size_t e = unicode::byte_offset(full, static_cast<size_t>(end));
  const std::string_view s = std::string_view(full).substr(b, e - b);
  auto test = [&](const Value& p) {
    if (!p.is_string())
      runtime_error(std::string(fn) + " first arg must be str or a tuple of str, not " + type_name(p));
    const std::string& x = p.str();
    if (x.size() > s.size()) return false;
    return at_start ? s.substr(0, x.size()) == x : s.substr(s.size() - x.size()) == x;
  };
  const Value& p = a.get(0);
  if (p.is_list() && p.seq_kind() == SeqKind::kTuple) {
    for (const Value& x : p.items())
      if (test(x)) return Value::boolean(true);
    return Value::boolean(false);
  }
  return Value::boolean(test(p));
}
Value m_startswith(State&, const Value& self, CallArgs& args) { return m_affix(self, args, "startswith", true); }
Value m_endswith(State&, const Value& self, CallArgs& args) { return m_affix(self, args, "endswith", false); }

Value m_replace(State& st, const Value& self, CallArgs& args) {
  ArgBinder a("replace", args, {"old", "new", "count"}, 2);
  const Value& old_v = str_arg(a, 0, "replace");
  const Value& new_v = str_arg(a, 1, "replace");
  const MarkedText old_t = self.is_safe() ? escape_value(old_v) : old_v.text();
  const MarkedText new_t = self.is_safe() ? escape_value(new_v) : new_v.text();
  const size_t n_old = std::max<size_t>(old_t.size(), 1);
  st.check_string_size(self.str().size() + (self.str().size() / n_old + 1) * new_t.size());
  return str_result(replace_text(self.text(), old_t, new_t, opt_int(a, 2, -1)), self);
}

Value m_format(State& st, const Value& self, CallArgs& args) {
  if (self.is_safe()) {
    // markupsafe: Markup.format escapes its arguments.
    CallArgs escaped;
    for (const Value& v : args.positional) escaped.positional.push_back(Value::string(escape_value(v), true));
    for (const auto& [k, v] : args.keyword) escaped.keyword.emplace_back(k, Value::string(escape_value(v), true));
    return Value::string(str_format(st, self.text(), escaped), true);
  }
  return Value::string(str_format(st, self.text(), args));
}

Value m_upper(State&, const Value& self, CallArgs& args) {
  no_args("upper", args);
  return str_result(self.text().map_ranges([](std::string_view s) { return unicode::upper(s); }), self);
}
Value m_lower(State&, const Value& self, CallArgs& args) {
  no_args("lower", args);
  return str_result(self.text().map_ranges([](std::string_view s) { return unicode::lower(s); }), self);
}
Value m_casefold(State&, const Value& self, CallArgs& args) {
  no_args("casefold", args);
  return str_result(self.text().map_ranges([](std::string_view s) { return unicode::lower(s); }), self);
}
Value m_swapcase(State&, const Value& self, CallArgs& args) {
  no_args("swapcase", args);
  return str_result(self.text().map_ranges([](std::string_view s) {
                      std::string out;
                      for (size_t i = 0; i < s.size();) {
                        const uint32_t cp = unicode::next(s, i);
                        unicode::append(out, unicode::is_upper(cp) ? unicode::to_lower(cp) : unicode::to_upper(cp));
                      }
                      return out;
                    }),
                    self);
}
Value m_title(State&, const Value& self, CallArgs& args) {
  no_args("title", args);
  return Value::string(MarkedText(title_case(self.str()), self.text().all_literal()), self.is_safe());
}
Value m_capitalize(State&, const Value& self, CallArgs& args) {
  no_args("capitalize", args);
  return Value::string(MarkedText(capitalize(self.str()), self.text().all_literal()), self.is_safe());
}

// find/rfind/index/rindex/count(sub, start=None, end=None): positions in code points.
struct Window {
  std::string_view s;
  size_t byte_begin;
};
Window window(const Value& self, const ArgBinder& a) {
  const std::string& full = self.str();
  const int64_t n = static_cast<int64_t>(unicode::length(full));
  auto clamp = [&](int64_t v) {
    if (v < 0) v += n;
    return std::clamp<int64_t>(v, 0, n);
  };
  const int64_t start = clamp(opt_int(a, 1, 0));
  const int64_t end = a.has_value(2) ? clamp(opt_int(a, 2, n)) : n;
  const size_t b = unicode::byte_offset(full, static_cast<size_t>(start));
  const size_t e = std::max(b, unicode::byte_offset(full, static_cast<size_t>(std::max(start, end))));
  return {std::string_view(full).substr(b, e - b), b};
}
int64_t find_impl(const Value& self, CallArgs& args, const char* fn, bool right) {
  ArgBinder a(fn, args, {"sub", "start", "end"}, 1);
  const std::string& sub = str_arg(a, 0, fn).str();
  const Window w = window(self, a);
  const size_t p = right ? w.s.rfind(sub) : w.s.find(sub);
  if (p == std::string_view::npos) return -1;
  return static_cast<int64_t>(unicode::length(std::string_view(self.str()).substr(0, w.byte_begin + p)));
}
Value m_find(State&, const Value& self, CallArgs& args) { return Value::integer(find_impl(self, args, "find", false)); }
Value m_rfind(State&, const Value& self, CallArgs& args) { return Value::integer(find_impl(self, args, "rfind", true)); }
Value m_index(State&, const Value& self, CallArgs& args) {
  const int64_t r = find_impl(self, args, "index", false);
  if (r < 0) runtime_error("substring not found");
  return Value::integer(r);
}
Value m_rindex(State&, const Value& self, CallArgs& args) {
  const int64_t r = find_impl(self, args, "rindex", true);
  if (r < 0) runtime_error("substring not found");
  return Value::integer(r);
}
Value m_count(State&, const Value& self, CallArgs& args) {
  ArgBinder a("count", args, {"sub", "start", "end"}, 1);
  const std::string& sub = str_arg(a, 0, "count").str();
  const Window w = window(self, a);
  if (sub.empty()) return Value::integer(static_cast<int64_t>(unicode::length(w.s)) + 1);
  int64_t n = 0;
  for (size_t p = w.s.find(sub); p != std::string_view::npos; p = w.s.find(sub, p + sub.size())) ++n;
  return Value::integer(n);
}

Value m_join(State& st, const Value& self, CallArgs& args) {
  ArgBinder a("join", args, {"iterable"}, 1);
  const std::vector<Value> items = iterate(st, a.get(0));
  MarkedText out;
  for (size_t i = 0; i < items.size(); ++i) {
    if (!items[i].is_string())
      runtime_error("sequence item " + std::to_string(i) + ": expected str instance, " + type_name(items[i]) + " found");
    if (i > 0) out.append(self.text());
    out.append(items[i].text());
    st.check_string_size(out.size());
  }
  return str_result(std::move(out), self);
}

Value partition_impl(const Value& self, CallArgs& args, const char* fn, bool right) {
  ArgBinder a(fn, args, {"sep"}, 1);
  const std::string& sep = str_arg(a, 0, fn).str();
  if (sep.empty()) runtime_error("empty separator");
  const std::string& s = self.str();
  const size_t p = right ? s.rfind(sep) : s.find(sep);
  const MarkedText& t = self.text();
  std::vector<Value> parts;
  if (p == std::string::npos) {
    const Value empty = str_result(MarkedText(), self);
    if (right) {
      parts = {empty, empty, self};
    } else {
      parts = {self, empty, empty};
    }
  } else {
    parts = {str_result(t.substr(0, p), self), str_result(t.substr(p, p + sep.size()), self),
             str_result(t.substr(p + sep.size(), s.size()), self)};
  }
  return Value::list(std::move(parts), SeqKind::kTuple);
}
Value m_partition(State&, const Value& self, CallArgs& args) { return partition_impl(self, args, "partition", false); }
Value m_rpartition(State&, const Value& self, CallArgs& args) { return partition_impl(self, args, "rpartition", true); }

Value m_removeprefix(State&, const Value& self, CallArgs& args) {
  ArgBinder a("removeprefix", args, {"prefix"}, 1);
  const std::string& p = str_arg(a, 0, "removeprefix").str();
  const std::string& s = self.str();
  if (s.compare(0, p.size(), p) == 0 && p.size() <= s.size()) return str_result(self.text().substr(p.size(), s.size()), self);
  return self;
}
Value m_removesuffix(State&, const Value& self, CallArgs& args) {
  ArgBinder a("removesuffix", args, {"suffix"}, 1);
  const std::string& p = str_arg(a, 0, "removesuffix").str();
  const std::string& s = self.str();
  if (!p.empty() && p.size() <= s.size() && s.compare(s.size() - p.size(), p.size(), p) == 0)
    return str_result(self.text().substr(0, s.size() - p.size()), self);
  return self;
}

// zfill/center/ljust/rjust: padding in code points.
Value pad_impl(State& st, const Value& self, CallArgs& args, const char* fn, char align) {
  ArgBinder a(fn, args, {"width", "fillchar"}, 1);
  const int64_t width = opt_int(a, 0, 0);
  std::string fill = " ";
  bool fill_literal = self.text().all_literal();  // padding is literal only if everything involved is
  if (a.has(1)) {
    const Value& f = str_arg(a, 1, fn);
    if (unicode::length(f.str()) != 1) runtime_error("The fill character must be exactly one character long");
    fill = f.str();
    fill_literal = fill_literal && f.text().all_literal();
  }
  const int64_t n = static_cast<int64_t>(unicode::length(self.str()));
  if (width <= n) return self;
  const size_t pad = static_cast<size_t>(width - n);
  st.check_string_size(self.str().size() + pad * fill.size());
  size_t left = 0;
  if (align == '>') left = pad;
  if (align == '^') left = pad / 2 + (pad & static_cast<size_t>(width) & 1);  // CPython's centering rule
  std::string l, r;
  for (size_t i = 0; i < left; ++i) l += fill;
  for (size_t i = left; i < pad; ++i) r += fill;
  MarkedText out(l, fill_literal);
  out.append(self.text());
  out.append(r, fill_literal);
  return str_result(std::move(out), self);
}
Value m_center(State& st, const Value& self, CallArgs& args) { return pad_impl(st, self, args, "center", '^'); }
Value m_ljust(State& st, const Value& self, CallArgs& args) { return pad_impl(st, self, args, "ljust", '<'); }
Value m_rjust(State& st, const Value& self, CallArgs& args) { return pad_impl(st, self, args, "rjust", '>'); }
Value m_zfill(State& st, const Value& self, CallArgs& args) {
  ArgBinder a("zfill", args, {"width"}, 1);
  const int64_t width = opt_int(a, 0, 0);
  const std::string& s = self.str();
  const int64_t n = static_cast<int64_t>(unicode::length(s));
  if (width <= n) return self;
  st.check_string_size(static_cast<size_t>(width));
  const size_t sign = (!s.empty() && (s[0] == '+' || s[0] == '-')) ? 1 : 0;
  MarkedText out = self.text().substr(0, sign);
  out.append(std::string(static_cast<size_t>(width - n), '0'), self.text().all_literal());
  out.append_range(self.text(), sign, s.size());
  return str_result(std::move(out), self);
}

template <bool (*Pred)(uint32_t)>
Value all_chars(const Value& self, CallArgs& args, const char* fn) {
  no_args(fn, args);
  const std::string& s = self.str();
  if (s.empty()) return Value::boolean(false);
  for (size_t i = 0; i < s.size();)
    if (!Pred(unicode::next(s, i))) return Value::boolean(false);
  return Value::boolean(true);
}
Value m_isdigit(State&, const Value& self, CallArgs& args) { return all_chars<unicode::is_digit>(self, args, "isdigit"); }
Value m_isdecimal(State&, const Value& self, CallArgs& args) { return all_chars<unicode::is_digit>(self, args, "isdecimal"); }
Value m_isnumeric(State&, const Value& self, CallArgs& args) { return all_chars<unicode::is_digit>(self, args, "isnumeric"); }
Value m_isalpha(State&, const Value& self, CallArgs& args) { return all_chars<unicode::is_alpha>(self, args, "isalpha"); }
Value m_isalnum(State&, const Value& self, CallArgs& args) { return all_chars<unicode::is_alnum>(self, args, "isalnum"); }
Value m_isspace(State&, const Value& self, CallArgs& args) { return all_chars<unicode::is_space>(self, args, "isspace"); }

Value case_test(const Value& self, CallArgs& args, const char* fn, bool want_upper) {
  no_args(fn, args);
  bool cased = false;
  const std::string& s = self.str();
  for (size_t i = 0; i < s.size();) {
    const uint32_t cp = unicode::next(s, i);
    if (want_upper ? unicode::is_lower(cp) : unicode::is_upper(cp)) return Value::boolean(false);
    if (unicode::is_lower(cp) || unicode::is_upper(cp)) cased = true;
  }
  return Value::boolean(cased);
}
Value m_islower(State&, const Value& self, CallArgs& args) { return case_test(self, args, "islower", false); }
Value m_isupper(State&, const Value& self, CallArgs& args) { return case_test(self, args, "isupper", true); }
Value m_istitle(State&, const Value& self, CallArgs& args) {
  no_args("istitle", args);
  return Value::boolean(!self.str().empty() && title_case(self.str()) == self.str() &&
                        self.str().find_first_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ") != std::string::npos);
}

// --- dict ------------------------------------------------------------------------------

Value dict_view(State& st, const Value& self, SeqKind kind) {
  std::vector<Value> out;
  const auto& items = self.dict_data().items;
  st.check_list_size(items.size());
  out.reserve(items.size());
  for (const auto& [k, v] : items) {
    if (kind == SeqKind::kItemsView) {
      out.push_back(Value::list({k, v}, SeqKind::kTuple));
    } else {
      out.push_back(kind == SeqKind::kKeysView ? k : v);
    }
  }
  return Value::list(std::move(out), kind);
}
Value m_items(State& st, const Value& self, CallArgs& args) {
  no_args("items", args);
  return dict_view(st, self, SeqKind::kItemsView);
}
Value m_keys(State& st, const Value& self, CallArgs& args) {
  no_args("keys", args);
  return dict_view(st, self, SeqKind::kKeysView);
}
Value m_values(State& st, const Value& self, CallArgs& args) {
  no_args("values", args);
  return dict_view(st, self, SeqKind::kValuesView);
}
Value m_get(State&, const Value& self, CallArgs& args) {
  ArgBinder a("get", args, {"key", "default"}, 1);
  if (a.get(0).is_list() && a.get(0).seq_kind() != SeqKind::kTuple) runtime_error("unhashable type: 'list'");
  if (const Value* v = self.dict_data().find(a.get(0))) return *v;
  return a.get_or(1, Value::none());
}
Value m_dict_copy(State&, const Value& self, CallArgs& args) {
  no_args("copy", args);
  return Value::dict(self.dict_data().items);
}

// --- list / tuple ----------------------------------------------------------------------

Value m_list_index(State&, const Value& self, CallArgs& args) {
  ArgBinder a("index", args, {"value", "start", "stop"}, 1);
  const auto& items = self.items();
  for (size_t i = 0; i < items.size(); ++i)
    if (values_equal(items[i], a.get(0))) return Value::integer(static_cast<int64_t>(i));
  runtime_error(repr(a.get(0)) + " is not in " + (self.seq_kind() == SeqKind::kTuple ? "tuple" : "list"));
}
Value m_list_count(State&, const Value& self, CallArgs& args) {
  ArgBinder a("count", args, {"value"}, 1);
  int64_t n = 0;
  for (const Value& v : self.items()) n += values_equal(v, a.get(0)) ? 1 : 0;
  return Value::integer(n);
}
Value m_list_copy(State&, const Value& self, CallArgs& args) {
  no_args("copy", args);
  return Value::list(self.items(), SeqKind::kList);
}

struct MethodDef {
  std::string_view name;
  MethodFn fn;
};

constexpr MethodDef kStrMethods[] = {
    {"capitalize", m_capitalize}, {"casefold", m_casefold}, {"center", m_center},
    {"count", m_count},           {"endswith", m_endswith}, {"find", m_find},
    {"format", m_format},         {"index", m_index},       {"isalnum", m_isalnum},
    {"isalpha", m_isalpha},       {"isdecimal", m_isdecimal}, {"isdigit", m_isdigit},
    {"islower", m_islower},       {"isnumeric", m_isnumeric}, {"isspace", m_isspace},
    {"istitle", m_istitle},       {"isupper", m_isupper},   {"join", m_join},
    {"ljust", m_ljust},           {"lower", m_lower},       {"lstrip", m_lstrip},
    {"partition", m_partition},   {"removeprefix", m_removeprefix}, {"removesuffix", m_removesuffix},
    {"replace", m_replace},       {"rfind", m_rfind},       {"rindex", m_rindex},
    {"rjust", m_rjust},           {"rpartition", m_rpartition}, {"rsplit", m_rsplit},
    {"rstrip", m_rstrip},         {"split", m_split},       {"splitlines", m_splitlines},
    {"startswith", m_startswith}, {"strip", m_strip},       {"swapcase", m_swapcase},
    {"title", m_title},           {"upper", m_upper},       {"zfill", m_zfill},
};
constexpr MethodDef kDictMethods[] = {
    {"copy", m_dict_copy}, {"get", m_get}, {"items", m_items}, {"keys", m_keys}, {"values", m_values},
};
constexpr MethodDef kListMethods[] = {{"copy", m_list_copy}, {"count", m_list_count}, {"index", m_list_index}};
constexpr MethodDef kTupleMethods[] = {{"count", m_list_count}, {"index", m_list_index}};
constexpr std::string_view kUnsafeList[] = {"append", "clear", "extend", "insert", "pop", "remove", "reverse", "sort"};
constexpr std::string_view kUnsafeDict[] = {"clear", "pop", "popitem", "setdefault", "update"};

template <size_t N>
std::optional<Value> bind(const MethodDef (&table)[N], const Value& self, std::string_view name) {
  for (const MethodDef& m : table)
    if (m.name == name) return Value::object(std::make_shared<BoundMethod>(self, std::string(name), m.fn));
  return std::nullopt;
}

template <size_t N>
std::optional<Value> refuse(const std::string_view (&names)[N], const Value& self, std::string_view name) {
  for (std::string_view n : names)
    if (n == name)
      return Value::undefined("access to attribute '" + std::string(name) + "' of '" + type_name(self) +
                                  "' object is unsafe.",
                              true);
  return std::nullopt;
}

}  // namespace

std::optional<Value> find_method(const Value& self, std::string_view name) {
  switch (self.type()) {
    case Value::Type::kString: return bind(kStrMethods, self, name);
    case Value::Type::kDict: {
      if (auto m = bind(kDictMethods, self, name)) return m;
      return refuse(kUnsafeDict, self, name);
    }
    case Value::Type::kList:
      if (self.seq_kind() == SeqKind::kList) {
        if (auto m = bind(kListMethods, self, name)) return m;
        return refuse(kUnsafeList, self, name);
      }
      if (self.seq_kind() == SeqKind::kTuple) return bind(kTupleMethods, self, name);
      return std::nullopt;
    default: return std::nullopt;
  }
}

MarkedText strip_text(const MarkedText& t, const std::string* chars, bool left, bool right) {
  const std::string& s = t.str();
  std::vector<uint32_t> set;
  if (chars) set = unicode::decode(*chars);
  auto in_set = [&](uint32_t cp) {
    if (!chars) return unicode::is_space(cp);
    return std::find(set.begin(), set.end(), cp) != set.end();
  };
  size_t b = 0, e = s.size();
  if (left) {
    while (b < e) {
      size_t i = b;
      if (!in_set(unicode::next(s, i))) break;
      b = i;
    }
  }
  if (right) {
    while (e > b) {
      const size_t start = prev_start(s, e);
      size_t i = start;
      if (!in_set(unicode::next(s, i))) break;
      e = start;
    }
  }
  if (b == 0 && e == s.size()) return t;
  return t.substr(b, e);
}

std::vector<Value> split_text(const Value& self, const std::string* sep, int64_t maxsplit, bool from_right) {
  const MarkedText& t = self.text();
  const std::string& s = t.str();
  const size_t n = s.size();
  std::vector<Value> parts;
  auto part = [&](size_t b, size_t e) { return Value::string(t.substr(b, e), self.is_safe()); };
  auto space_at = [&](size_t i) {
    size_t j = i;
    return unicode::is_space(unicode::next(s, j));
  };
  auto cp_end = [&](size_t i) { return i + unicode::seq_len(static_cast<unsigned char>(s[i])); };
  int64_t splits = 0;
  if (!sep) {
    if (!from_right) {
      size_t i = 0;
      while (true) {
        while (i < n && space_at(i)) i = cp_end(i);
        if (i >= n) break;
        if (maxsplit >= 0 && splits == maxsplit) {
          parts.push_back(part(i, n));
          break;
        }
        size_t j = i;
        while (j < n && !space_at(j)) j = cp_end(j);
        parts.push_back(part(i, j));
        ++splits;
        i = j;
      }
    } else {
      size_t e = n;
      while (true) {
        while (e > 0 && space_at(prev_start(s, e))) e = prev_start(s, e);
        if (e == 0) break;
        if (maxsplit >= 0 && splits == maxsplit) {
          parts.push_back(part(0, e));
          break;
        }
        size_t b = e;
        while (b > 0 && !space_at(prev_start(s, b))) b = prev_start(s, b);
        parts.push_back(part(b, e));
        ++splits;
        e = b;
      }
      std::reverse(parts.begin(), parts.end());
    }
    return parts;
  }
  if (!from_right) {
    size_t pos = 0;
    for (size_t k; (maxsplit < 0 || splits < maxsplit) && (k = s.find(*sep, pos)) != std::string::npos; ++splits) {
      parts.push_back(part(pos, k));
      pos = k + sep->size();
    }
    parts.push_back(part(pos, n));
  } else {
    size_t end = n;
    while (maxsplit < 0 || splits < maxsplit) {
      if (end < sep->size()) break;
      const size_t k = s.rfind(*sep, end - sep->size());
      if (k == std::string::npos) break;
      parts.push_back(part(k + sep->size(), end));
      end = k;
      ++splits;
    }
    parts.push_back(part(0, end));
    std::reverse(parts.begin(), parts.end());
  }
  return parts;
}

MarkedText replace_text(const MarkedText& t, const MarkedText& old_t, const MarkedText& new_t, int64_t count) {
  const std::string& s = t.str();
  const std::string& old_s = old_t.str();
  MarkedText out;
  if (old_s.empty()) {
    // Python inserts `new` before every code point and at the end.
    size_t i = 0;
    int64_t done = 0;
    while (true) {
      if (count >= 0 && done >= count) break;
      out.append(new_t);
      ++done;
      if (i >= s.size()) break;
      const size_t e = i + unicode::seq_len(static_cast<unsigned char>(s[i]));
      out.append_range(t, i, e);
      i = e;
    }
    out.append_range(t, i, s.size());
    return out;
  }
  size_t pos = 0;
  int64_t done = 0;
  for (size_t k; (count < 0 || done < count) && (k = s.find(old_s, pos)) != std::string::npos; ++done) {
    out.append_range(t, pos, k);
    out.append(new_t);
    pos = k + old_s.size();
  }
  out.append_range(t, pos, s.size());
  return out;
}

std::string title_case(std::string_view s) {
  std::string out;
  bool prev_cased = false;
  for (size_t i = 0; i < s.size();) {
    const uint32_t cp = unicode::next(s, i);
    const bool cased = unicode::is_upper(cp) || unicode::is_lower(cp);
    if (!cased) {
      unicode::append(out, cp);
    } else if (prev_cased) {
      unicode::append(out, unicode::to_lower(cp));
    } else if (cp == 0xDF) {
      out += "Ss";  // the title case of ß
    } else {
      unicode::append(out, unicode::to_upper(cp));
    }
    prev_cased = cased;
  }
  return out;
}

std::string capitalize(std::string_view s) {
  std::string out;
  bool first = true;
  for (size_t i = 0; i < s.size();) {
    const uint32_t cp = unicode::next(s, i);
    if (first && cp == 0xDF) {
      out += "Ss";  // the title case of ß
    } else {
      unicode::append(out, first ? unicode::to_upper(cp) : unicode::to_lower(cp));
    }
    first = false;
  }
  return out;
}

}  // namespace ubatch::jinja
