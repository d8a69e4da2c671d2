// JSON Schema → GBNF (contract in json_schema.h). Each schema becomes a GBNF expression;
// objects, arrays and referenced definitions get their own rules (named after where they
// are), and the shared JSON primitives (strings, numbers, any value) are appended once.
#include "grammar/json_schema.h"

#include <cmath>
#include <map>
#include <set>
#include <vector>

#include <fmt/format.h>

#include "grammar/gbnf_text.h"
#include "grammar/regex_gbnf.h"

namespace ubatch::grammar {

namespace {

using ojson = nlohmann::ordered_json;

constexpr int kMaxDepth = 128;
constexpr int64_t kMaxItems = 1000;
constexpr int64_t kMaxLength = 10000;
constexpr int kMaxIntDigits = 18;  // integer parts are at most this long
constexpr int64_t kIntLimit = 999'999'999'999'999'999;  // the largest such integer
constexpr int64_t kInf = INT64_MAX;  // an absent upper bound (kIntLimit caps what is generated)

// The JSON primitives every generated grammar may use. A string character is written literally
// (UTF-8) or as one of the two-character escapes (RFC 8259 section 7); `\uXXXX` escapes are not
// generated: every character they could spell has a literal or short form except the control
// characters U+0000-U+001F other than \b \f \n \r \t, and a small model sampled at temperature 1
// was seen to loop inside them (`"C:\u002ED\u0019\u0019\u0019...` until max_tokens, a tool call
// on the default model, tests/python/test_openai_tools.py).
constexpr const char* kPrimitives = R"(ws ::= [ \t\n]{0,20}
json-char ::= [^"\\\x00-\x1F] | "\\" ["\\/bfnrt]
json-string ::= "\"" json-char* "\""
json-integer ::= "-"? ("0" | [1-9] [0-9]{0,17})
json-number ::= "-"? ("0" | [1-9] [0-9]{0,17}) ("." [0-9]{1,15})? ([eE] [-+]? [0-9]{1,2})?
json-boolean ::= "true" | "false"
json-null ::= "null"
json-value ::= json-object | json-array | json-string | json-number | json-boolean | json-null
json-object ::= "{" ws ( json-member ( "," ws json-member )* )? "}"
json-member ::= json-string ws ":" ws json-value ws
json-array ::= "[" ws ( json-value ws ( "," ws json-value ws )* )? "]"
)";

const std::set<std::string> kAnnotations = {"$schema", "$id",     "$anchor",    "$comment", "title",
                                            "description", "default", "examples", "deprecated",
                                            "readOnly",    "writeOnly", "$defs",  "definitions"};
const std::set<std::string> kKeywords = {
    "type",      "enum",      "const",        "$ref",       "anyOf",     "oneOf",            "allOf",
    "properties", "required", "additionalProperties", "items", "prefixItems", "minItems",   "maxItems",
    "uniqueItems", "minLength", "maxLength",  "pattern",    "format",    "minimum",          "maximum",
    "exclusiveMinimum", "exclusiveMaximum"};

// Formats as GBNF over the string's content (no escapes needed: ASCII without '"' or '\').
const std::map<std::string, std::string> kFormats = {
    {"date", "json-date"},
    {"time", "json-time"},
    {"date-time", "json-date \"T\" json-time"},
    {"uuid", "json-hex{8} \"-\" json-hex{4} \"-\" json-hex{4} \"-\" json-hex{4} \"-\" json-hex{12}"},
    {"email", "[a-zA-Z0-9._%+-]{1,64} \"@\" [a-zA-Z0-9-]{1,63} (\".\" [a-zA-Z0-9-]{1,63}){1,4}"},
    {"ipv4", "json-octet \".\" json-octet \".\" json-octet \".\" json-octet"},
};
constexpr const char* kFormatRules = R"(json-hex ::= [0-9a-fA-F]
json-date ::= [0-9]{4} "-" (("0" [13578] | "1" [02]) "-" ("0" [1-9] | [12] [0-9] | "3" [01]) | ("0" [469] | "11") "-" ("0" [1-9] | [12] [0-9] | "30") | "02" "-" ("0" [1-9] | "1" [0-9] | "2" [0-8]))
json-time ::= ([01] [0-9] | "2" [0-3]) ":" [0-5] [0-9] ":" [0-5] [0-9] ("." [0-9]{1,6})? ("Z" | [+-] ([01] [0-9] | "2" [0-3]) ":" [0-5] [0-9])
json-octet ::= "25" [0-5] | "2" [0-4] [0-9] | "1" [0-9] [0-9] | [1-9]? [0-9]
)";

std::string pointer_escape(const std::string& key) {
  std::string out;
  for (char c : key) {
    if (c == '~') out += "~0";
    else if (c == '/') out += "~1";
    else out += c;
  }
  return out;
}

// A rule name from arbitrary text: [a-zA-Z0-9-], at most 40 characters.
std::string sanitize(const std::string& hint) {
  std::string out;
  for (char c : hint) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
    if (ok) out += c;
    else if (!out.empty() && out.back() != '-') out += '-';
    if (out.size() >= 40) break;
  }
  while (!out.empty() && out.back() == '-') out.pop_back();
  return out.empty() ? "rule" : out;
}

std::string digits_class(int lo, int hi) {
  if (lo == hi) return fmt::format("\"{}\"", lo);
  return fmt::format("[{}-{}]", lo, hi);
}

// Decimal strings of equal length from x to y (x <= y), as GBNF.
std::string same_length_range(const std::string& x, const std::string& y) {
  if (x.empty()) return "";
  if (x == y) return fmt::format("\"{}\"", x);
  const size_t n = x.size() - 1;
  if (x[0] == y[0]) {
    const std::string rest = same_length_range(x.substr(1), y.substr(1));
    return fmt::format("\"{}\" {}", x[0], rest);
  }
  const bool x_zeros = x.find_first_not_of('0', 1) == std::string::npos;
  const bool y_nines = y.find_first_not_of('9', 1) == std::string::npos;
  const int lo_first = (x[0] - '0') + (x_zeros ? 0 : 1);
  const int hi_first = (y[0] - '0') - (y_nines ? 0 : 1);
  std::vector<std::string> alts;
  if (!x_zeros) alts.push_back(fmt::format("\"{}\" {}", x[0], same_length_range(x.substr(1), std::string(n, '9'))));
  if (lo_first <= hi_first)
    alts.push_back(digits_class(lo_first, hi_first) + (n > 0 ? fmt::format(" [0-9]{{{}}}", n) : ""));
  if (!y_nines) alts.push_back(fmt::format("\"{}\" {}", y[0], same_length_range(std::string(n, '0'), y.substr(1))));
  std::string out = "(";
  for (size_t i = 0; i < alts.size(); ++i) {
    if (i) out += " | ";
    out += alts[i];
  }
  return out + ")";
}

int n_digits(int64_t v) { return static_cast<int>(std::to_string(v).size()); }

// Integers a..b (0 <= a <= b <= kIntLimit) without leading zeros.
std::string uint_range(int64_t a, int64_t b) {
  std::vector<std::string> alts;
  const int da = n_digits(a), db = n_digits(b);
  for (int len = da; len <= db; ++len) {
    const int64_t first = len == 1 ? 0 : static_cast<int64_t>(std::pow(10.0, len - 1));
    const int64_t last = len == kMaxIntDigits ? kIntLimit : static_cast<int64_t>(std::pow(10.0, len)) - 1;
    const int64_t lo = std::max(a, first), hi = std::min(b, last);
    if (lo > hi) continue;
    if (len > da && hi == last && len < db && b == kIntLimit) {
      // Every length from here to the longest is complete: one expression.
      alts.push_back(fmt::format("[1-9] [0-9]{{{},{}}}", len - 1, kMaxIntDigits - 1));
      break;
    }
    alts.push_back(same_length_range(std::to_string(lo), std::to_string(hi)));
  }
  if (alts.size() == 1) return alts[0];
  std::string out = "(";
  for (size_t i = 0; i < alts.size(); ++i) {
    if (i) out += " | ";
    out += alts[i];
  }
  return out + ")";
}

std::string alternatives(const std::vector<std::string>& alts) {
  if (alts.size() == 1) return alts[0];
  std::string out = "(";
  for (size_t i = 0; i < alts.size(); ++i) {
    if (i) out += " | ";
    out += alts[i];
  }
  return out + ")";
}

constexpr const char* kFracAny = "(\".\" [0-9]{1,15})?";
constexpr const char* kFracZero = "(\".\" \"0\"{1,15})?";
constexpr const char* kFracNonzero = "\".\" \"0\"{0,14} [1-9] [0-9]{0,14}";

// Non-negative decimals m (integer part, optional fraction, no exponent) with lo < m or
// lo <= m (lo_x: exclusive), and m < hi or m <= hi (hi = kInf: unbounded); 0 <= lo <= kIntLimit.
// Empty when none.
std::string nonneg_decimal(int64_t lo, bool lo_x, int64_t hi, bool hi_x) {
  std::vector<std::string> parts;
  const int64_t low_i = lo_x ? lo + 1 : lo;
  const int64_t high_i = hi == kInf ? kIntLimit : std::min(hi - 1, kIntLimit);
  if (low_i <= high_i) parts.push_back(uint_range(low_i, high_i) + " " + kFracAny);  // any fraction
  if (lo_x && (hi == kInf || lo < hi)) parts.push_back(fmt::format("\"{}\" {}", lo, kFracNonzero));  // (lo, lo + 1)
  if (hi != kInf && !hi_x && (hi > lo || (hi == lo && !lo_x)) && hi <= kIntLimit)
    parts.push_back(fmt::format("\"{}\" {}", hi, kFracZero));  // hi itself
  if (parts.empty()) return "";
  return alternatives(parts);
}

class Converter {
 public:
  explicit Converter(const ojson& root) : root_(root) {}

  Result<std::string> run() {
    Result<std::string> root = visit(root_, "#", "root", 0);
    if (!root) return root.status();
    std::string out = "root ::= " + root.value() + "\n";
    for (const auto& [name, body] : rules_) out += name + " ::= " + body + "\n";
    out += kPrimitives;
    if (formats_) out += kFormatRules;
    return out;
  }

 private:
  const ojson& root_;
  std::vector<std::pair<std::string, std::string>> rules_;
  std::set<std::string> names_ = {"root", "ws"};
  std::map<std::string, std::string> refs_;  // "$ref" value → rule name
  bool formats_ = false;

  static Status error(const std::string& path, const std::string& what) {
    return Status::error(fmt::format("json_schema: at {}: {}", path, what));
  }

  std::string reserve(const std::string& hint) {
    std::string base = sanitize(hint);
    if (base.rfind("json-", 0) == 0) base = "s-" + base;
    std::string name = base;
    for (int k = 2; names_.count(name); ++k) name = fmt::format("{}-{}", base, k);
    names_.insert(name);
    return name;
  }
  std::string add_rule(const std::string& hint, std::string body) {
    std::string name = reserve(hint);
    rules_.push_back({name, std::move(body)});
    return name;
  }
  // A rule for an expression longer than a name.
  std::string as_rule(const std::string& hint, std::string expr) {
    if (expr.size() <= 32 && expr.find(' ') == std::string::npos) return expr;
    return add_rule(hint, std::move(expr));
  }

  Result<const ojson*> resolve(const std::string& ref, const std::string& path) const {
    if (ref == "#") return &root_;
    if (ref.rfind("#/", 0) != 0)
      return error(path, fmt::format("$ref '{}': only references within the schema (\"#\" or \"#/...\") are supported", ref));
    const ojson* cur = &root_;
    size_t pos = 2;
    while (pos <= ref.size()) {
      const size_t slash = ref.find('/', pos);
      std::string tok = ref.substr(pos, slash == std::string::npos ? std::string::npos : slash - pos);
      std::string key;
      for (size_t i = 0; i < tok.size(); ++i) {
        if (tok[i] == '~' && i + 1 < tok.size() && (tok[i + 1] == '0' || tok[i + 1] == '1')) {
          key += tok[i + 1] == '0' ? '~' : '/';
          ++i;
        } else {
          key += tok[i];
        }
      }
      if (cur->is_object() && cur->contains(key)) {
        cur = &(*cur)[key];
      } else if (cur->is_array() && !key.empty() && key.find_first_not_of("0123456789") == std::string::npos &&
                 std::stoull(key.substr(0, 9)) < cur->size()) {
        cur = &(*cur)[std::stoull(key.substr(0, 9))];
      } else {
        return error(path, fmt::format("$ref '{}' does not resolve (no '{}')", ref, key));
      }
      if (slash == std::string::npos) break;
      pos = slash + 1;
    }
    return cur;
  }

  Result<std::string> visit(const ojson& s, const std::string& path, const std::string& hint, int depth) {
    if (depth > kMaxDepth) return error(path, fmt::format("schemas nested deeper than {}", kMaxDepth));
    if (s.is_boolean()) {
      if (s.get<bool>()) return std::string("json-value");
      return error(path, "the schema 'false' matches nothing");
    }
    if (!s.is_object()) return error(path, "a schema must be an object or a boolean");
    for (auto it = s.begin(); it != s.end(); ++it)
      if (!kAnnotations.count(it.key()) && !kKeywords.count(it.key()))
        return error(path, fmt::format("unsupported keyword '{}'", it.key()));
    auto constraining_besides = [&](std::initializer_list<const char*> allowed) -> std::string {
      for (auto it = s.begin(); it != s.end(); ++it) {
        if (kAnnotations.count(it.key())) continue;
        bool ok = false;
        for (const char* a : allowed) ok = ok || it.key() == a;
        if (!ok) return it.key();
      }
      return "";
    };

    if (const auto it = s.find("$ref"); it != s.end()) {
      if (!it->is_string()) return error(path, "'$ref' must be a string");
      if (std::string other = constraining_besides({"$ref"}); !other.empty())
        return error(path, fmt::format("keyword '{}' beside '$ref' is not supported", other));
      const std::string ref = it->get<std::string>();
      if (auto r = refs_.find(ref); r != refs_.end()) return r->second;
      Result<const ojson*> target = resolve(ref, path);
      if (!target) return target.status();
      const size_t slash = ref.rfind('/');
      const std::string name = reserve(ref == "#" ? "root-ref" : "def-" + ref.substr(slash + 1));
      refs_[ref] = name;  // before visiting: recursive references find it
      Result<std::string> body = visit(**target, ref, name, depth + 1);
      if (!body) return body.status();
      rules_.push_back({name, body.value()});
      return name;
    }
    if (const auto it = s.find("const"); it != s.end()) return gbnf_literal(it->dump());
    if (const auto it = s.find("enum"); it != s.end()) {
      if (!it->is_array() || it->empty()) return error(path, "'enum' must be a non-empty array");
      std::vector<std::string> alts;
      for (const ojson& v : *it)
        if (matches_type(s, v)) alts.push_back(gbnf_literal(v.dump()));
      if (alts.empty()) return error(path, "no value of 'enum' has the schema's 'type'");
      return alternatives(alts);
    }
    for (const char* comb : {"anyOf", "oneOf"}) {
      const auto it = s.find(comb);
      if (it == s.end()) continue;
      if (!it->is_array() || it->empty()) return error(path, fmt::format("'{}' must be a non-empty array", comb));
      if (std::string other = constraining_besides({comb}); !other.empty())
        return error(path, fmt::format("keyword '{}' beside '{}' is not supported", other, comb));
      std::vector<std::string> alts;
      for (size_t i = 0; i < it->size(); ++i) {
        Result<std::string> e = visit((*it)[i], fmt::format("{}/{}/{}", path, comb, i), fmt::format("{}-{}", hint, i), depth + 1);
        if (!e) return e.status();
        alts.push_back(e.value());
      }
      return alternatives(alts);
    }
    if (const auto it = s.find("allOf"); it != s.end()) {
      if (!it->is_array() || it->size() != 1)
        return error(path, "'allOf' is supported with exactly one schema");
      if (std::string other = constraining_besides({"allOf"}); !other.empty())
        return error(path, fmt::format("keyword '{}' beside 'allOf' is not supported", other));
      return visit((*it)[0], path + "/allOf/0", hint, depth + 1);
    }

    std::vector<std::string> types;
    if (const auto it = s.find("type"); it != s.end()) {
      if (it->is_string()) {
        types.push_back(it->get<std::string>());
      } else if (it->is_array() && !it->empty()) {
        for (const ojson& t : *it) {
          if (!t.is_string()) return error(path, "'type' must be a string or an array of strings");
          types.push_back(t.get<std::string>());
        }
      } else {
        return error(path, "'type' must be a string or an array of strings");
      }
    } else {
      // No type: the one the keywords imply (a subset of what the schema allows), else any.
      if (s.contains("properties") || s.contains("additionalProperties") || s.contains("required"))
        types.push_back("object");
      else if (s.contains("items") || s.contains("prefixItems") || s.contains("minItems") || s.contains("maxItems"))
        types.push_back("array");
      else if (s.contains("pattern") || s.contains("format") || s.contains("minLength") || s.contains("maxLength"))
        types.push_back("string");
      else if (s.contains("minimum") || s.contains("maximum") || s.contains("exclusiveMinimum") ||
               s.contains("exclusiveMaximum"))
        types.push_back("number");
      else
        return std::string("json-value");
    }
    std::vector<std::string> alts;
    for (const std::string& t : types) {
      Result<std::string> e = typed(s, t, path, types.size() > 1 ? hint + "-" + t : hint, depth);
      if (!e) return e.status();
      alts.push_back(e.value());
    }
    return alternatives(alts);
  }

  static bool matches_type(const ojson& s, const ojson& v) {
    const auto it = s.find("type");
    if (it == s.end()) return true;
    auto one = [&](const std::string& t) {
      if (t == "string") return v.is_string();
      if (t == "integer") return v.is_number_integer() || (v.is_number_float() && std::floor(v.get<double>()) == v.get<double>());
      if (t == "number") return v.is_number();
      if (t == "boolean") return v.is_boolean();
      if (t == "null") return v.is_null();
      if (t == "object") return v.is_object();
      if (t == "array") return v.is_array();
      return false;
    };
    if (it->is_string()) return one(it->get<std::string>());
    if (it->is_array())
      for (const ojson& t : *it)
        if (t.is_string() && one(t.get<std::string>())) return true;
    return false;
  }

  Result<std::string> typed(const ojson& s, const std::string& t, const std::string& path, const std::string& hint,
                            int depth) {
    if (t == "object") return object(s, path, hint, depth);
    if (t == "array") return array(s, path, hint, depth);
    if (t == "string") return string(s, path, hint);
    if (t == "number" || t == "integer") return number(s, path, t == "integer");
    if (t == "boolean") return std::string("json-boolean");
    if (t == "null") return std::string("json-null");
    return error(path, fmt::format("unknown type '{}'", t));
  }

  Result<std::string> object(const ojson& s, const std::string& path, const std::string& hint, int depth) {
    struct Member {
      std::string key;
      std::string kv;  // "\"key\"" ws ":" ws VALUE ws
      bool required = false;
    };
    std::vector<Member> members;
    std::set<std::string> required;
    if (const auto it = s.find("required"); it != s.end()) {
      if (!it->is_array()) return error(path, "'required' must be an array of strings");
      for (const ojson& r : *it) {
        if (!r.is_string()) return error(path, "'required' must be an array of strings");
        required.insert(r.get<std::string>());
      }
    }
    if (const auto it = s.find("properties"); it != s.end()) {
      if (!it->is_object()) return error(path, "'properties' must be an object");
      for (auto p = it->begin(); p != it->end(); ++p) {
        const std::string sub_path = path + "/properties/" + pointer_escape(p.key());
        Result<std::string> v = visit(p.value(), sub_path, hint + "-" + p.key(), depth + 1);
        if (!v) return v.status();
        const std::string value = as_rule(hint + "-" + p.key(), v.value());
        members.push_back({p.key(), gbnf_literal(ojson(p.key()).dump()) + " ws \":\" ws " + value + " ws",
                           required.count(p.key()) > 0});
      }
    }
    for (const std::string& r : required) {
      bool listed = false;
      for (const Member& m : members) listed = listed || m.key == r;
      if (!listed) members.push_back({r, gbnf_literal(ojson(r).dump()) + " ws \":\" ws json-value ws", true});
    }
    std::string extra;  // one further member, "" when none are allowed
    if (const auto it = s.find("additionalProperties"); it != s.end()) {
      if (!(it->is_boolean() && !it->get<bool>())) {
        if (!it->is_boolean() && !it->is_object()) return error(path, "'additionalProperties' must be a boolean or a schema");
        std::string value = "json-value";
        if (it->is_object()) {
          Result<std::string> v = visit(*it, path + "/additionalProperties", hint + "-value", depth + 1);
          if (!v) return v.status();
          value = as_rule(hint + "-value", v.value());
        }
        std::vector<std::string> keys;
        for (const Member& m : members) keys.push_back(m.key);
        const std::string key = keys.empty() ? "json-string" : other_key(keys, hint);
        extra = as_rule(hint + "-extra", key + " ws \":\" ws " + value + " ws");
      }
    }
    if (members.empty() && extra.empty()) return std::string("\"{\" ws \"}\"");

    bool all_required = extra.empty();
    for (const Member& m : members) all_required = all_required && m.required;
    std::string body;
    if (all_required) {
      for (size_t i = 0; i < members.size(); ++i) {
        if (i) body += " \",\" ws ";
        body += members[i].kv;
      }
    } else {
      // tail[i]: members i.. after at least one was written (each a rule); first(i): members
      // i.. before any was written (a rule only where an optional member needs the next one).
      const size_t n = members.size();
      std::vector<std::string> tail(n + 1);
      if (!extra.empty()) tail[n] = add_rule(hint + "-tail", "(\",\" ws " + extra + ")*");
      for (size_t i = n; i-- > 1;) {
        const Member& m = members[i];
        const std::string t = tail[i + 1].empty() ? "" : " " + tail[i + 1];
        tail[i] = add_rule(fmt::format("{}-tail{}", hint, i),
                           m.required ? "\",\" ws " + m.kv + t : "(\",\" ws " + m.kv + ")?" + t);
      }
      auto first = [&](auto&& self, size_t i) -> std::string {
        if (i == n) return extra.empty() ? "" : "(" + extra + (tail[n].empty() ? "" : " " + tail[n]) + ")?";
        const Member& m = members[i];
        const std::string head = m.kv + (tail[i + 1].empty() ? "" : " " + tail[i + 1]);
        if (m.required) return head;
        const std::string rest = self(self, i + 1);
        if (rest.empty()) return "(" + head + ")?";
        return "(" + head + " | " + add_rule(fmt::format("{}-first{}", hint, i + 1), rest) + ")";
      };
      body = first(first, 0);
    }
    return add_rule(hint, "\"{\" ws " + body + " \"}\"");
  }

  // A JSON string key whose text is none of `keys` (unescaped characters only).
  std::string other_key(const std::vector<std::string>& keys, const std::string& hint) {
    // Trie of the keys over code points; each node becomes a rule for "the rest is not a key".
    struct Node {
      std::map<uint32_t, size_t> next;
      bool terminal = false;
    };
    std::vector<Node> trie(1);
    for (const std::string& k : keys) {
      bool plain = true;
      std::vector<uint32_t> cps;
      for (size_t i = 0; i < k.size();) {
        const auto b = static_cast<unsigned char>(k[i]);
        const size_t len = b < 0x80 ? 1 : b < 0xE0 ? 2 : b < 0xF0 ? 3 : 4;
        uint32_t cp = len == 1 ? b : len == 2 ? (b & 0x1F) : len == 3 ? (b & 0x0F) : (b & 0x07);
        for (size_t j = 1; j < len && i + j < k.size(); ++j) cp = (cp << 6) | (static_cast<unsigned char>(k[i + j]) & 0x3F);
        i += len;
        if (cp < 0x20 || cp == '"' || cp == '\\') plain = false;
        cps.push_back(cp);
      }
      if (!plain) continue;  // such a key is never produced from unescaped characters
      size_t cur = 0;
      for (uint32_t cp : cps) {
        auto it = trie[cur].next.find(cp);
        if (it == trie[cur].next.end()) {
          trie.push_back({});
          it = trie[cur].next.emplace(cp, trie.size() - 1).first;
        }
        cur = it->second;
      }
      trie[cur].terminal = true;
    }
    const std::vector<CharRange> all = complement_ranges(normalize_ranges({{0, 0x1F}, {'"', '"'}, {'\\', '\\'}}));
    const std::string any = add_rule(hint + "-keychar", gbnf_class(all));
    std::vector<std::string> names(trie.size());
    for (size_t i = 0; i < trie.size(); ++i) names[i] = reserve(fmt::format("{}-key{}", hint, i));
    for (size_t i = 0; i < trie.size(); ++i) {
      const Node& node = trie[i];
      std::vector<std::string> alts;
      if (!node.terminal) alts.push_back("\"\"");
      std::vector<CharRange> used;
      for (const auto& [cp, child] : node.next) {
        std::string lit;
        append_utf8(cp, lit);
        alts.push_back(gbnf_literal(lit) + " " + names[child]);
        used.push_back({cp, cp});
      }
      std::vector<CharRange> rest = all;
      if (!used.empty()) {
        // all minus used
        std::vector<CharRange> excluded = normalize_ranges({{0, 0x1F}, {'"', '"'}, {'\\', '\\'}});
        excluded.insert(excluded.end(), used.begin(), used.end());
        rest = complement_ranges(normalize_ranges(excluded));
      }
      if (!rest.empty()) alts.push_back(gbnf_class(rest) + " " + any + "*");
      rules_.push_back({names[i], alternatives(alts)});
    }
    return "\"\\\"\" " + names[0] + " \"\\\"\"";
  }

  static Status read_count(const ojson& s, const char* key, const std::string& path, int64_t limit, int64_t& out) {
    const auto it = s.find(key);
    if (it == s.end()) return Status::ok();
    if (!it->is_number_integer() && !(it->is_number_float() && std::floor(it->get<double>()) == it->get<double>()))
      return error(path, fmt::format("'{}' must be a non-negative integer", key));
    const double v = it->get<double>();
    if (v < 0) return error(path, fmt::format("'{}' must be a non-negative integer", key));
    if (v > static_cast<double>(limit)) return error(path, fmt::format("'{}' above {} is not supported", key, limit));
    out = static_cast<int64_t>(v);
    return Status::ok();
  }

  static std::string repeat(const std::string& item, int64_t min, int64_t max) {
    if (max == 0) return "";
    if (max == kInf) {
      if (min == 0) return item + "*";
      if (min == 1) return item + "+";
      return fmt::format("{}{{{},}}", item, min);
    }
    if (min == 0 && max == 1) return item + "?";
    if (min == max) return fmt::format("{}{{{}}}", item, min);
    return fmt::format("{}{{{},{}}}", item, min, max);
  }

  Result<std::string> array(const ojson& s, const std::string& path, const std::string& hint, int depth) {
    int64_t min = 0, max = kInf;
    if (Status st = read_count(s, "minItems", path, kMaxItems, min); !st) return st;
    {
      int64_t m = -1;
      if (Status st = read_count(s, "maxItems", path, kMaxItems, m); !st) return st;
      if (m >= 0) max = m;
    }
    std::vector<std::string> prefix;
    if (const auto it = s.find("prefixItems"); it != s.end()) {
      if (!it->is_array()) return error(path, "'prefixItems' must be an array of schemas");
      for (size_t i = 0; i < it->size(); ++i) {
        Result<std::string> e = visit((*it)[i], fmt::format("{}/prefixItems/{}", path, i), fmt::format("{}-{}", hint, i), depth + 1);
        if (!e) return e.status();
        prefix.push_back(e.value());
      }
    }
    const auto k = static_cast<int64_t>(prefix.size());
    std::string item = "json-value";
    bool items_allowed = true;
    if (const auto it = s.find("items"); it != s.end()) {
      if (it->is_boolean() && !it->get<bool>()) {
        items_allowed = false;
      } else {
        Result<std::string> e = visit(*it, path + "/items", hint + "-item", depth + 1);
        if (!e) return e.status();
        item = as_rule(hint + "-item", e.value());
      }
    }
    if (!items_allowed) max = std::min(max, k);
    if (min > max) return error(path, "'minItems' is above the number of items allowed");
    if (const auto it = s.find("uniqueItems"); it != s.end() && !(it->is_boolean() && !it->get<bool>()) && max > 1)
      return error(path, "'uniqueItems' is not supported");
    std::string tail;
    if (k == 0) {
      if (max > 0) {
        const std::string next = add_rule(hint + "-next", "\",\" ws " + item + " ws");
        const std::string rest = repeat(next, std::max<int64_t>(min - 1, 0), max == kInf ? kInf : max - 1);
        tail = item + " ws" + (rest.empty() ? "" : " " + rest);
        if (min == 0) tail = "(" + tail + ")?";
      }
    } else {
      std::string acc;
      if (items_allowed && max > k) {
        const std::string next = add_rule(hint + "-next", "\",\" ws " + item + " ws");
        acc = repeat(next, std::max<int64_t>(min - k, 0), max == kInf ? kInf : max - k);
      }
      for (int64_t j = k; j-- > 0;) {
        std::string seg = j > 0 ? "\",\" ws " : "";
        seg += prefix[static_cast<size_t>(j)] + " ws";
        if (!acc.empty()) seg += " " + acc;
        acc = j < min ? seg : "(" + seg + ")?";
      }
      tail = acc;
    }
    return add_rule(hint, "\"[\" ws " + (tail.empty() ? "" : tail + " ") + "\"]\"");
  }

  Result<std::string> string(const ojson& s, const std::string& path, const std::string& hint) {
    const bool has_len = s.contains("minLength") || s.contains("maxLength");
    if (const auto it = s.find("pattern"); it != s.end()) {
      if (!it->is_string()) return error(path, "'pattern' must be a string");
      if (s.contains("format")) return error(path, "'pattern' together with 'format' is not supported");
      if (has_len) return error(path, "'pattern' together with 'minLength'/'maxLength' is not supported");
      Result<std::string> re = regex_to_gbnf(it->get<std::string>(), "json-char");
      if (!re) return error(path, re.message());
      return add_rule(hint, "\"\\\"\" " + re.value() + " \"\\\"\"");
    }
    if (const auto it = s.find("format"); it != s.end()) {
      if (!it->is_string()) return error(path, "'format' must be a string");
      const auto f = kFormats.find(it->get<std::string>());
      if (f == kFormats.end())
        return error(path, fmt::format("format '{}' is not supported (supported: date, time, date-time, uuid, email, "
                                       "ipv4)",
                                       it->get<std::string>()));
      if (has_len) return error(path, "'format' together with 'minLength'/'maxLength' is not supported");
      formats_ = true;
      return add_rule(hint, "\"\\\"\" " + f->second + " \"\\\"\"");
    }
    if (has_len) {
      int64_t min = 0, max = kInf;
      if (Status st = read_count(s, "minLength", path, kMaxLength, min); !st) return st;
      int64_t m = -1;
      if (Status st = read_count(s, "maxLength", path, kMaxLength, m); !st) return st;
      if (m >= 0) max = m;
      if (min > max) return error(path, "'minLength' is above 'maxLength'");
      const std::string body = repeat("json-char", min, max);
      return add_rule(hint, "\"\\\"\" " + (body.empty() ? "" : body + " ") + "\"\\\"\"");
    }
    return std::string("json-string");
  }

  // Reads a bound: false when absent. Draft-4 boolean exclusiveMinimum/Maximum make
  // minimum/maximum exclusive.
  static Status bound(const ojson& s, const char* key, const char* excl_key, const std::string& path, bool& has,
                      double& value, bool& excl) {
    has = false;
    excl = false;
    const auto e = s.find(excl_key);
    const auto v = s.find(key);
    if (v != s.end()) {
      if (!v->is_number()) return error(path, fmt::format("'{}' must be a number", key));
      has = true;
      value = v->get<double>();
      if (e != s.end() && e->is_boolean()) excl = e->get<bool>();
    }
    if (e != s.end() && !e->is_boolean()) {
      if (!e->is_number()) return error(path, fmt::format("'{}' must be a number", excl_key));
      const double x = e->get<double>();
      // The tighter of the two bounds wins (exclusive at equal values).
      const bool lower = std::string(key) == "minimum";
      if (!has || (lower ? x >= value : x <= value)) {
        value = x;
        excl = true;
        has = true;
      }
    }
    if (has && !std::isfinite(value)) return error(path, fmt::format("'{}' must be finite", key));
    return Status::ok();
  }

  Result<std::string> number(const ojson& s, const std::string& path, bool integer) {
    bool has_lo = false, has_hi = false, lo_x = false, hi_x = false;
    double lo = 0, hi = 0;
    if (Status st = bound(s, "minimum", "exclusiveMinimum", path, has_lo, lo, lo_x); !st) return st;
    if (Status st = bound(s, "maximum", "exclusiveMaximum", path, has_hi, hi, hi_x); !st) return st;
    if (!has_lo && !has_hi) return std::string(integer ? "json-integer" : "json-number");
    const double limit = static_cast<double>(kIntLimit);
    if (integer) {
      // The integer bounds: ceil/floor, one step in for exclusive bounds.
      int64_t a = INT64_MIN, b = kInf;
      if (has_lo) {
        const double c = lo_x ? std::floor(lo) + 1 : std::ceil(lo);
        if (c > limit) return error(path, "'minimum' above 10^18 is not supported");
        if (c >= -limit) a = static_cast<int64_t>(c);
      }
      if (has_hi) {
        const double f = hi_x ? std::ceil(hi) - 1 : std::floor(hi);
        if (f < -limit) return error(path, "'maximum' below -10^18 is not supported");
        if (f <= limit) b = static_cast<int64_t>(f);
      }
      if (a != INT64_MIN && b != kInf && a > b) return error(path, "no integer lies between the bounds");
      std::vector<std::string> parts;
      if (a == INT64_MIN || a < 0) {  // negative integers -m, m in [max(1, -b), -a]
        const int64_t m_lo = (b == kInf || b >= 0) ? 1 : -b;
        const int64_t m_hi = a == INT64_MIN ? kIntLimit : -a;
        if (m_lo <= m_hi) parts.push_back("\"-\" " + uint_range(m_lo, m_hi));
      }
      if (b == kInf || b >= 0) parts.push_back(uint_range(a == INT64_MIN ? 0 : std::max<int64_t>(a, 0), b == kInf ? kIntLimit : b));
      return alternatives(parts);
    }
    for (auto [has, v, key] : {std::tuple{has_lo, lo, "minimum"}, std::tuple{has_hi, hi, "maximum"}}) {
      if (!has) continue;
      if (std::floor(v) != v)
        return error(path, fmt::format("'{}' {}: only integer-valued bounds are supported for type number (use type "
                                       "integer, or an integer bound)",
                                       key, v));
      if (std::fabs(v) > limit) return error(path, fmt::format("'{}' beyond ±10^18 is not supported", key));
    }
    const int64_t L = has_lo ? static_cast<int64_t>(lo) : INT64_MIN;
    const int64_t H = has_hi ? static_cast<int64_t>(hi) : kInf;
    if (has_lo && has_hi && (L > H || (L == H && (lo_x || hi_x)))) return error(path, "no number lies between the bounds");
    std::vector<std::string> parts;
    // x >= 0.
    if (H == kInf || H > 0 || (H == 0 && !hi_x)) {
      const bool from_zero = L == INT64_MIN || L < 0;
      const std::string p = nonneg_decimal(from_zero ? 0 : L, from_zero ? false : lo_x, H, hi_x);
      if (!p.empty()) parts.push_back(p);
    }
    // x < 0: m = -x > 0 with m <= -L (m < -L when exclusive) and m >= -H (m > -H).
    if (L == INT64_MIN || L < 0) {
      const int64_t m_lo = (H == kInf || H >= 0) ? 0 : -H;
      const bool m_lo_x = (H == kInf || H >= 0) ? true : hi_x;
      const int64_t m_hi = L == INT64_MIN ? kInf : -L;
      const std::string p = nonneg_decimal(m_lo, m_lo_x, m_hi, lo_x);
      if (!p.empty()) parts.push_back("\"-\" " + p);
    }
    if (parts.empty()) return error(path, "no number lies between the bounds");
    return alternatives(parts);
  }
};

}  // namespace

Result<std::string> json_schema_to_gbnf(const nlohmann::ordered_json& schema) {
  return Converter(schema).run();
}

std::string json_object_gbnf() { return std::string("root ::= json-object\n") + kPrimitives; }

}  // namespace ubatch::grammar
