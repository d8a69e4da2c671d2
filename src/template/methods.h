// Python methods of str, dict and list values, as jinja2's ImmutableSandboxedEnvironment lets
// a template call them (`content.strip()`, `message.get('name')`, `tool.items()`).
//
//   str   split rsplit splitlines strip lstrip rstrip startswith endswith replace format
//         upper lower title capitalize swapcase casefold find rfind index rindex count join
//         partition rpartition removeprefix removesuffix zfill center ljust rjust
//         isdigit isdecimal isnumeric isalpha isalnum isspace islower isupper istitle
//   dict  items keys values get copy
//   list  index count copy (tuples: index count)
// The mutating methods (list append/extend/insert/pop/remove/clear/sort/reverse, dict
// pop/popitem/setdefault/update/clear) are refused as the immutable sandbox refuses them:
// looking them up gives an "unsafe" undefined, calling it a SecurityError (kRuntime).
// Strings keep their marks through every method that returns parts of them (marked_text.h).
#pragma once

#include <optional>
#include <string_view>

#include "template/value.h"

namespace ubatch::jinja {

// The method `name` of a str/dict/list value bound to it, the sandbox's refusal for a
// mutating one, or nullopt when the type has no such method.
std::optional<Value> find_method(const Value& self, std::string_view name);

// Python's str.strip/lstrip/rstrip: `chars` null = whitespace (unicode::is_space).
MarkedText strip_text(const MarkedText& s, const std::string* chars, bool left, bool right);
// str.split(sep, maxsplit) with sep null = runs of whitespace; parts keep their marks.
std::vector<Value> split_text(const Value& s, const std::string* sep, int64_t maxsplit, bool from_right);
// str.replace(old, new, count); count < 0 = all.
MarkedText replace_text(const MarkedText& s, const MarkedText& old_text, const MarkedText& new_text, int64_t count);
// Python str.title / str.capitalize.
std::string title_case(std::string_view s);
std::string capitalize(std::string_view s);

}  // namespace ubatch::jinja
