// Python number and string formatting (py_format.h). The digit generation is the C
// library's (std::to_chars for the shortest round-trip digits, snprintf for fixed precision,
// both in the C locale); the layout rules on top are Python's (Objects/floatobject.c repr,
// Python/formatter_unicode.c for the mini-language, Objects/unicodeobject.c for %).
#include "template/py_format.h"

#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "template/error.h"
#include "template/state.h"
#include "template/unicode.h"
#include "template/value_ops.h"

namespace ubatch::jinja {

std::string float_repr(double f) {
  if (std::isnan(f)) return "nan";
  if (std::isinf(f)) return f < 0 ? "-inf" : "inf";
  if (f == 0) return std::signbit(f) ? "-0.0" : "0.0";
  char buf[64];
  const auto r = std::to_chars(buf, buf + sizeof buf, f, std::chars_format::scientific);
  std::string_view s(buf, static_cast<size_t>(r.ptr - buf));  // "-1.2345e+05"
  std::string out;
  if (s[0] == '-') {
    out = "-";
    s.remove_prefix(1);
  }
  const size_t e = s.find('e');
  std::string digits;
  for (char c : s.substr(0, e))
    if (c != '.') digits += c;
  const int exp = std::atoi(std::string(s.substr(e + 1)).c_str());
  while (digits.size() > 1 && digits.back() == '0') digits.pop_back();
  if (exp < -4 || exp >= 16) {
    out += digits[0];
    if (digits.size() > 1) {
      out += '.';
      out += digits.substr(1);
    }
    out += 'e';
    out += exp < 0 ? '-' : '+';
    const int a = exp < 0 ? -exp : exp;
    if (a < 10) out += '0';
    out += std::to_string(a);
  } else if (exp >= 0) {
    const size_t int_digits = static_cast<size_t>(exp) + 1;
    if (digits.size() <= int_digits) {
      out += digits;
      out.append(int_digits - digits.size(), '0');
      out += ".0";
    } else {
      out += digits.substr(0, int_digits);
      out += '.';
      out += digits.substr(int_digits);
    }
  } else {
    out += "0.";
    out.append(static_cast<size_t>(-exp - 1), '0');
    out += digits;
  }
  return out;
}

namespace {

struct Spec {
  std::string fill = " ";
  char align = 0;  // < > = ^
  char sign = 0;   // + - space
  bool alternate = false;
  bool zero = false;
  int64_t width = -1;
  char grouping = 0;  // , _
  int64_t precision = -1;
  char type = 0;
};

bool is_align(char c) { return c == '<' || c == '>' || c == '=' || c == '^'; }

Spec parse_spec(std::string_view spec) {
  Spec s;
  size_t i = 0;
  if (!spec.empty()) {
    size_t first_len = unicode::seq_len(static_cast<unsigned char>(spec[0]));
    if (first_len < spec.size() && is_align(spec[first_len])) {
      s.fill = std::string(spec.substr(0, first_len));
      s.align = spec[first_len];
      i = first_len + 1;
    } else if (is_align(spec[0])) {
      s.align = spec[0];
      i = 1;
    }
  }
  if (i < spec.size() && (spec[i] == '+' || spec[i] == '-' || spec[i] == ' ')) s.sign = spec[i++];
  if (i < spec.size() && spec[i] == 'z') ++i;
  if (i < spec.size() && spec[i] == '#') {
    s.alternate = true;
    ++i;
  }
  if (i < spec.size() && spec[i] == '0') {
    s.zero = true;
    ++i;
  }
  auto read_int = [&](int64_t& out) {
    if (i >= spec.size() || spec[i] < '0' || spec[i] > '9') return false;
    out = 0;
    while (i < spec.size() && spec[i] >= '0' && spec[i] <= '9') {
      out = out * 10 + (spec[i++] - '0');
      if (out > 100000) throw_error(ErrorKind::kLimit, "format width or precision too big (limit 100000)");
    }
    return true;
  };
  read_int(s.width);
  if (i < spec.size() && (spec[i] == ',' || spec[i] == '_')) s.grouping = spec[i++];
  if (i < spec.size() && spec[i] == '.') {
    ++i;
    if (!read_int(s.precision)) runtime_error("Format specifier missing precision");
  }
  if (i < spec.size()) s.type = spec[i++];
  if (i < spec.size()) runtime_error("Invalid format specifier '" + std::string(spec) + "'");
  if (s.zero && !s.align) {
    s.fill = "0";
    s.align = '=';
  }
  return s;
}

// Pads `body` (sign/prefix already split off into `prefix`) to the spec's width.
std::string pad(const Spec& s, std::string prefix, std::string body, char default_align) {
  const char align = s.align ? s.align : default_align;
  const size_t len = unicode::length(prefix) + unicode::length(body);
  if (s.width < 0 || static_cast<size_t>(s.width) <= len) return prefix + body;
  const size_t n = static_cast<size_t>(s.width) - len;
  auto fill = [&](size_t k) {
    std::string f;
    for (size_t j = 0; j < k; ++j) f += s.fill;
    return f;
  };
  switch (align) {
    case '<': return prefix + body + fill(n);
    case '^': return fill(n / 2) + prefix + body + fill(n - n / 2);
    case '=': return prefix + fill(n) + body;
    default: return fill(n) + prefix + body;
  }
}

std::string group_digits(const std::string& digits, char sep, size_t every) {
  std::string out;
  const size_t n = digits.size();
  for (size_t i = 0; i < n; ++i) {
    if (i > 0 && (n - i) % every == 0) out += sep;
    out += digits[i];
  }
  return out;
}

std::string sign_prefix(const Spec& s, bool negative) {
  if (negative) return "-";
  if (s.sign == '+') return "+";
  if (s.sign == ' ') return " ";
  return "";
}

std::string format_int(int64_t v, const Spec& s) {
  const bool neg = v < 0;
  const uint64_t mag = neg ? 0 - static_cast<uint64_t>(v) : static_cast<uint64_t>(v);
  std::string prefix = sign_prefix(s, neg);
  std::string digits;
  char type = s.type ? s.type : 'd';
  if (type == 'c') {
    if (v < 0 || v > 0x10FFFF) runtime_error("%c arg not in range(0x110000)");
    std::string c;
    unicode::append(c, static_cast<uint32_t>(v));
    return pad(s, "", c, '<');
  }
  int base = 10;
  if (type == 'b') base = 2;
  if (type == 'o') base = 8;
  if (type == 'x' || type == 'X') base = 16;
  if (type != 'd' && type != 'n' && base == 10) runtime_error(std::string("Unknown format code '") + type + "' for object of type 'int'");
  char buf[72];
  auto r = std::to_chars(buf, buf + sizeof buf, mag, base);
  digits.assign(buf, r.ptr);
  if (type == 'X')
    for (char& c : digits) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  if (s.alternate && base != 10) prefix += base == 2 ? "0b" : base == 8 ? "0o" : (type == 'X' ? "0X" : "0x");
  if (s.grouping) digits = group_digits(digits, s.grouping, base == 10 ? 3 : 4);
  return pad(s, prefix, digits, '>');
}

std::string format_float(double f, const Spec& s) {
  const bool neg = std::signbit(f) && !std::isnan(f);
  const double mag = std::fabs(f);
  std::string prefix = sign_prefix(s, neg);
  std::string body;
  char type = s.type;
  if (std::isinf(mag) || std::isnan(mag)) {
    body = std::isnan(mag) ? "nan" : "inf";
    if (type == 'E' || type == 'F' || type == 'G')
      for (char& c : body) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    if (type == '%') body += '%';
    return pad(s, prefix, body, '>');
  }
  if (type == 0 && s.precision < 0) {
    body = float_repr(mag);
  } else {
    const bool none_type = type == 0;
    int64_t prec = s.precision < 0 ? 6 : s.precision;
    double x = mag;
    char conv = type;
    if (none_type) conv = 'g';
    if (type == '%') {
      x *= 100;
      conv = 'f';
    }
    if (type == 'n') conv = 'g';
    if (conv != 'e' && conv != 'E' && conv != 'f' && conv != 'F' && conv != 'g' && conv != 'G')
      runtime_error(std::string("Unknown format code '") + type + "' for object of type 'float'");
    if ((conv == 'g' || conv == 'G') && prec == 0) prec = 1;
    std::string fmt = std::string("%") + (s.alternate ? "#" : "") + ".*" + conv;
    std::vector<char> buf(static_cast<size_t>(prec) + 400);
    const int n = std::snprintf(buf.data(), buf.size(), fmt.c_str(), static_cast<int>(prec), x);
    body.assign(buf.data(), static_cast<size_t>(n > 0 ? n : 0));
    if (none_type && body.find_first_of(".eEn") == std::string::npos) body += ".0";
    if (type == '%') body += '%';
  }
  if (s.grouping) {
    size_t end = body.find_first_of(".eE%");
    if (end == std::string::npos) end = body.size();
    body = group_digits(body.substr(0, end), s.grouping, 3) + body.substr(end);
  }
  return pad(s, prefix, body, '>');
}

}  // namespace

std::string format_spec(const Value& v, std::string_view spec_text) {
  if (spec_text.empty()) return to_str(v);
  const Spec s = parse_spec(spec_text);
  switch (v.type()) {
    case Value::Type::kBool:
    case Value::Type::kInt:
      if (s.type == 'e' || s.type == 'E' || s.type == 'f' || s.type == 'F' || s.type == 'g' || s.type == 'G' ||
          s.type == '%')
        return format_float(static_cast<double>(v.to_int()), s);
      return format_int(v.to_int(), s);
    case Value::Type::kFloat: return format_float(v.as_float(), s);
    case Value::Type::kString: {
      if (s.type != 0 && s.type != 's')
        runtime_error(std::string("Unknown format code '") + s.type + "' for object of type 'str'");
      if (s.sign) runtime_error("Sign not allowed in string format specifier");
      if (s.align == '=') runtime_error("'=' alignment not allowed in string format specifier");
      std::string body = v.str();
      if (s.precision >= 0) body = body.substr(0, unicode::byte_offset(body, static_cast<size_t>(s.precision)));
      return pad(s, "", body, '<');
    }
    default:
      runtime_error("unsupported format string passed to " + type_name(v) + ".__format__");
  }
}

namespace {

// ascii(): repr with every non-ASCII code point escaped.
std::string ascii_repr(const Value& v) {
  const std::string r = repr(v);
  std::string out;
  for (size_t i = 0; i < r.size();) {
    const uint32_t cp = unicode::next(r, i);
    char buf[16];
    if (cp < 0x80) {
      out += static_cast<char>(cp);
      continue;
    }
    if (cp <= 0xFF) {
      std::snprintf(buf, sizeof buf, "\\x%02x", cp);
    } else if (cp <= 0xFFFF) {
      std::snprintf(buf, sizeof buf, "\\u%04x", cp);
    } else {
      std::snprintf(buf, sizeof buf, "\\U%08x", cp);
    }
    out += buf;
  }
  return out;
}

// Appends v formatted with spec (and conversion) to out, keeping a string's marks when it is
// inserted unchanged.
void append_formatted(MarkedText& out, const Value& v, char conversion, std::string_view spec) {
  if (conversion == 'r' || conversion == 'a') {
    const std::string r = conversion == 'r' ? repr(v) : ascii_repr(v);
    const Value s = Value::string(MarkedText(r, all_literal(v)));
    out.append(format_spec(s, spec), all_literal(v));
    return;
  }
  if (spec.empty()) {
    out.append(to_text(v));
    return;
  }
  out.append(format_spec(v, spec), all_literal(v));
}

}  // namespace

MarkedText str_format(State& st, const MarkedText& fmt_text, const CallArgs& args) {
  const std::string& fmt = fmt_text.str();
  MarkedText out;
  size_t auto_index = 0;
  bool used_auto = false, used_manual = false;
  size_t lit_begin = 0;
  auto flush = [&](size_t end) {
    out.append_range(fmt_text, lit_begin, end);
  };
  auto lookup = [&](std::string_view field) -> Value {
    // field_name: arg_name ("." attr | "[" key "]")*
    size_t i = 0;
    while (i < field.size() && field[i] != '.' && field[i] != '[') ++i;
    const std::string_view head = field.substr(0, i);
    Value v;
    if (head.empty()) {
      if (used_manual) runtime_error("cannot switch from manual field specification to automatic field numbering");
      used_auto = true;
      if (auto_index >= args.positional.size())
        runtime_error("Replacement index " + std::to_string(auto_index) + " out of range for positional args tuple");
      v = args.positional[auto_index++];
    } else if (head.find_first_not_of("0123456789") == std::string_view::npos) {
      if (used_auto) runtime_error("cannot switch from automatic field numbering to manual field specification");
      used_manual = true;
      const size_t idx = static_cast<size_t>(std::strtoull(std::string(head).c_str(), nullptr, 10));
      if (head.size() > 9 || idx >= args.positional.size())
        runtime_error("Replacement index " + std::string(head) + " out of range for positional args tuple");
      v = args.positional[idx];
    } else {
      bool found = false;
      for (const auto& [k, kv] : args.keyword)
        if (k == head) {
          v = kv;
          found = true;
        }
      if (!found) runtime_error("KeyError: '" + std::string(head) + "'");
    }
    while (i < field.size()) {
      if (field[i] == '.') {
        size_t j = i + 1;
        while (j < field.size() && field[j] != '.' && field[j] != '[') ++j;
        v = get_attr(st, v, field.substr(i + 1, j - i - 1));
        i = j;
      } else {
        const size_t close = field.find(']', i);
        if (close == std::string_view::npos) runtime_error("Missing ']' in format string");
        const std::string_view key = field.substr(i + 1, close - i - 1);
        if (!key.empty() && key.find_first_not_of("0123456789") == std::string_view::npos && key.size() < 10)
          v = get_item(st, v, Value::integer(std::strtoll(std::string(key).c_str(), nullptr, 10)));
        else
          v = get_item(st, v, Value::data(key));
        i = close + 1;
      }
      if (v.is_undefined()) fail_undefined(v);
    }
    return v;
  };
  size_t i = 0;
  while (i < fmt.size()) {
    const char c = fmt[i];
    if (c == '}') {
      if (i + 1 < fmt.size() && fmt[i + 1] == '}') {
        flush(i + 1);
        i += 2;
        lit_begin = i;
        continue;
      }
      runtime_error("Single '}' encountered in format string");
    }
    if (c != '{') {
      ++i;
      continue;
    }
    if (i + 1 < fmt.size() && fmt[i + 1] == '{') {
      flush(i + 1);
      i += 2;
      lit_begin = i;
      continue;
    }
    flush(i);
    // Find the matching '}' (one level of nested braces in the spec).
    size_t j = i + 1;
    int depth = 1;
    while (j < fmt.size() && depth > 0) {
      if (fmt[j] == '{') ++depth;
      if (fmt[j] == '}') --depth;
      if (depth > 0) ++j;
    }
    if (j >= fmt.size()) runtime_error("expected '}' before end of string");
    const std::string_view field_all = std::string_view(fmt).substr(i + 1, j - i - 1);
    size_t name_end = field_all.find_first_of("!:");
    if (name_end == std::string_view::npos) name_end = field_all.size();
    // '[' ... ']' may hold ':' or '!': skip brackets when looking for the end of the name.
    for (size_t k = 0; k < field_all.size(); ++k) {
      if (field_all[k] == '[') {
        const size_t close = field_all.find(']', k);
        if (close == std::string_view::npos) break;
        k = close;
        continue;
      }
      if (field_all[k] == '!' || field_all[k] == ':') {
        name_end = k;
        break;
      }
      name_end = field_all.size();
    }
    const std::string_view name = field_all.substr(0, name_end);
    char conversion = 0;
    std::string_view rest = field_all.substr(name_end);
    if (!rest.empty() && rest[0] == '!') {
      if (rest.size() < 2) runtime_error("end of string while looking for conversion specifier");
      conversion = rest[1];
      if (conversion != 'r' && conversion != 's' && conversion != 'a')
        runtime_error(std::string("Unknown conversion specifier ") + conversion);
      rest.remove_prefix(2);
      if (!rest.empty() && rest[0] != ':') runtime_error("expected ':' after conversion specifier");
    }
    std::string spec;
    if (!rest.empty()) {
      // Nested replacement fields inside the spec ("{:{width}}").
      const std::string_view raw = rest.substr(1);
      for (size_t k = 0; k < raw.size(); ++k) {
        if (raw[k] == '{') {
          const size_t close = raw.find('}', k);
          if (close == std::string_view::npos) runtime_error("unmatched '{' in format spec");
          spec += to_str(lookup(raw.substr(k + 1, close - k - 1)));
          k = close;
        } else {
          spec += raw[k];
        }
      }
    }
    const Value v = lookup(name);
    append_formatted(out, v, conversion, spec);
    st.check_string_size(out.size());
    i = j + 1;
    lit_begin = i;
  }
  flush(fmt.size());
  return out;
}

MarkedText percent_format(State& st, const MarkedText& fmt_text, const Value& args) {
  const std::string& fmt = fmt_text.str();
  std::vector<Value> positional;
  const bool mapping = args.is_dict();
  // Python skips the "not all arguments converted" check when the right operand looks like a
  // mapping (has __getitem__ and is neither a tuple nor a str): dicts, lists, Undefined.
  const bool mapping_like = mapping || args.is_undefined() || (args.is_list() && args.seq_kind() == SeqKind::kList);
  if (args.is_list() && args.seq_kind() == SeqKind::kTuple) {
    positional = args.items();
  } else {
    positional.push_back(args);
  }
  size_t next_arg = 0;
  bool used_mapping_key = false;
  auto take = [&]() -> Value {
    if (next_arg >= positional.size()) runtime_error("not enough arguments for format string");
    return positional[next_arg++];
  };
  MarkedText out;
  size_t lit_begin = 0;
  size_t i = 0;
  while (i < fmt.size()) {
    if (fmt[i] != '%') {
      ++i;
      continue;
    }
    out.append_range(fmt_text, lit_begin, i);
    ++i;
    if (i >= fmt.size()) runtime_error("incomplete format");
    Value arg;
    bool have_arg = false;
    if (fmt[i] == '(') {
      const size_t close = fmt.find(')', i);
      if (close == std::string::npos) runtime_error("incomplete format key");
      if (!mapping) runtime_error("format requires a mapping");
      const Value* found = args.dict_data().find(std::string_view(fmt).substr(i + 1, close - i - 1));
      if (!found) runtime_error("KeyError: '" + fmt.substr(i + 1, close - i - 1) + "'");
      arg = *found;
      have_arg = true;
      used_mapping_key = true;
      i = close + 1;
    }
    std::string flags;
    while (i < fmt.size() && std::string_view("-+ #0").find(fmt[i]) != std::string_view::npos) flags += fmt[i++];
    std::string width, precision;
    if (i < fmt.size() && fmt[i] == '*') {
      const Value w = take();
      if (!w.is_int()) runtime_error("* wants int");
      width = std::to_string(w.as_int());
      ++i;
    } else {
      while (i < fmt.size() && fmt[i] >= '0' && fmt[i] <= '9') width += fmt[i++];
    }
    bool has_precision = false;
    if (i < fmt.size() && fmt[i] == '.') {
      has_precision = true;
      ++i;
      if (i < fmt.size() && fmt[i] == '*') {
        const Value p = take();
        if (!p.is_int()) runtime_error("* wants int");
        precision = std::to_string(p.as_int());
        ++i;
      } else {
        while (i < fmt.size() && fmt[i] >= '0' && fmt[i] <= '9') precision += fmt[i++];
      }
      if (precision.empty()) precision = "0";
    }
    if (width.size() > 6 || precision.size() > 6)
      throw_error(ErrorKind::kLimit, "format width or precision too big (limit 100000)");
    if (i < fmt.size() && (fmt[i] == 'h' || fmt[i] == 'l' || fmt[i] == 'L')) ++i;
    if (i >= fmt.size()) runtime_error("incomplete format");
    const char conv = fmt[i++];
    if (conv == '%') {
      out.append_range(fmt_text, i - 1, i);
      lit_begin = i;
      continue;
    }
    if (!have_arg) arg = take();
    // Build the equivalent format-spec: flags → align/sign/alternate/zero.
    std::string spec;
    const bool left = flags.find('-') != std::string::npos;
    if (left) spec += '<';
    if (flags.find('+') != std::string::npos) {
      spec += '+';
    } else if (flags.find(' ') != std::string::npos) {
      spec += ' ';
    }
    if (flags.find('#') != std::string::npos) spec += '#';
    const bool zero = flags.find('0') != std::string::npos && !left;
    Value shown = arg;
    char type = conv;
    switch (conv) {
      case 's':
      case 'r':
      case 'a': {
        const std::string s = conv == 's' ? to_str(arg) : conv == 'r' ? repr(arg) : ascii_repr(arg);
        if (!left) spec = ">";
        spec += width;
        if (has_precision) spec += "." + precision;
        if (conv == 's' && spec == ">") {
          out.append(to_text(arg));
        } else {
          out.append(format_spec(Value::data(s), spec), all_literal(arg));
        }
        lit_begin = i;
        st.check_string_size(out.size());
        continue;
      }
      case 'd':
      case 'i':
      case 'u':
        type = 'd';
        [[fallthrough]];
      case 'o':
      case 'x':
      case 'X':
        if (arg.is_float()) {
          if (!std::isfinite(arg.as_float()) || std::fabs(arg.as_float()) > 9.2e18)
            runtime_error("cannot convert float to integer");
          shown = Value::integer(static_cast<int64_t>(arg.as_float()));
        } else if (!arg.is_number()) {
          runtime_error(std::string("%") + conv + " format: a real number is required, not " + type_name(arg));
        }
        break;
      case 'e':
      case 'E':
      case 'f':
      case 'F':
      case 'g':
      case 'G':
        if (!arg.is_number()) runtime_error("must be real number, not " + type_name(arg));
        shown = Value::number(arg.to_float());
        break;
      case 'c':
        if (arg.is_string() && unicode::length(arg.str()) == 1) {
          shown = arg;
          type = 0;
        } else if (!arg.is_int()) {
          runtime_error("%c requires int or char");
        }
        break;
      default:
        runtime_error(std::string("unsupported format character '") + conv + "'");
    }
    if (zero) spec += '0';
    spec += width;
    if (has_precision && type != 'd' && type != 'o' && type != 'x' && type != 'X') spec += "." + precision;
    if (type) spec += type;
    std::string text = format_spec(shown, spec);
    if (has_precision && (type == 'd' || type == 'o' || type == 'x' || type == 'X')) {
      // %.<p>d: at least p digits.
      size_t digits_begin = text.find_first_of("0123456789");
      if (text.find("0x") != std::string::npos || text.find("0X") != std::string::npos || text.find("0o") != std::string::npos)
        digits_begin += 2;
      size_t digits_end = digits_begin;
      while (digits_end < text.size() && std::isxdigit(static_cast<unsigned char>(text[digits_end]))) ++digits_end;
      const size_t want = static_cast<size_t>(std::atoi(precision.c_str()));
      if (digits_end - digits_begin < want) text.insert(digits_begin, want - (digits_end - digits_begin), '0');
    }
    out.append(text, all_literal(arg));
    st.check_string_size(out.size());
    lit_begin = i;
  }
  out.append_range(fmt_text, lit_begin, fmt.size());
  if (!used_mapping_key && !mapping_like && next_arg < positional.size())
    runtime_error("not all arguments converted during string formatting");
  return out;
}

}  // namespace ubatch::jinja
