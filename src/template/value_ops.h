// Operations on values with Python's semantics, as jinja2 evaluates them under the
// ImmutableSandboxedEnvironment: truth, equality, ordering, str()/repr(), the arithmetic and
// membership operators, iteration, and attribute/item lookup (jinja2's getattr/getitem
// fallbacks: `x.key` tries the attribute — a method — first, then the item; `x['key']` the
// item first, then the attribute).
//
// Errors are thrown as TemplateException (kRuntime, or kLimit for sizes) with Python's
// wording where it helps ("unsupported operand type(s) for +: 'int' and 'str'").
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "template/value.h"

namespace ubatch::jinja {

enum class BinOp : uint8_t { kAdd, kSub, kMul, kDiv, kFloorDiv, kMod, kPow };
enum class CmpOp : uint8_t { kEq, kNe, kLt, kLe, kGt, kGe, kIn, kNotIn };

// Python truth (generators are always true; undefined is false).
bool truthy(const Value& v);
// Python ==: numbers across int/float/bool, str with Markup, list vs tuple never equal, dicts
// as mappings, undefined equal only to undefined; objects by identity.
bool values_equal(const Value& a, const Value& b);
// Python ordering (<): numbers, strings (code point order), lists/tuples lexicographically;
// -1, 0 or 1; anything else is a TypeError.
int compare_values(const Value& a, const Value& b, std::string_view op_for_message = "<");
bool compare(State& st, CmpOp op, const Value& a, const Value& b);

// str(v): strings unchanged (with their marks); undefined ""; everything else its Python
// text (True, None, 1.0, ['a', 1], {'k': 'v'}) marked as data (marked_text.h).
MarkedText to_text(const Value& v);
std::string to_str(const Value& v);
// repr(v) (Python's quoting rules for strings).
std::string repr(const Value& v);
std::string repr_string(std::string_view s);
// Whether v is a string that is entirely literal (anything else counts as data).
bool all_literal(const Value& v);

// HTML escaping as markupsafe.escape: & < > " ' → &amp; &lt; &gt; &#34; &#39;.
std::string html_escape(std::string_view s);
// markupsafe's escape of a value: a safe string unchanged, anything else str() then escaped.
MarkedText escape_value(const Value& v);

Value binary_op(State& st, BinOp op, const Value& a, const Value& b);
Value negate(const Value& v);  // unary -
Value unary_plus(const Value& v);
// `item in container` (substring, element, key).
bool contains(State& st, const Value& container, const Value& item);

// The elements a for loop / list() sees: chars of a string, list items, dict keys; an
// undefined value iterates as empty; an iterator is consumed. Not iterable: TypeError.
std::vector<Value> iterate(State& st, const Value& v);
// len(): strings in code points; an iterator has none (TypeError).
int64_t length(const Value& v);

// obj.name and obj[key] (see the file comment); a miss gives undefined with a hint.
Value get_attr(State& st, const Value& obj, std::string_view name);
Value get_item(State& st, const Value& obj, const Value& key);
// obj[start:stop:step] for strings (by code point), lists and tuples; absent bounds = nullopt.
Value get_slice(State& st, const Value& obj, const std::optional<Value>& start, const std::optional<Value>& stop,
                const std::optional<Value>& step);

// Throws kRuntime with the undefined value's hint (jinja2's UndefinedError), or the
// SecurityError of an unsafe undefined.
[[noreturn]] void fail_undefined(const Value& v);

}  // namespace ubatch::jinja
