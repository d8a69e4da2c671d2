// Filters (`value|name(args)`): jinja2 3.1's built-in filters with transformers' `tojson`,
// one small function each, looked up by name at parse time (an unknown name is an error only
// when the expression is evaluated, as in jinja2 3.x: DeepSeek's `from_json` branch).
//
//   abs attr batch capitalize center count d default dictsort e escape first float
//   forceescape format indent int items join last length list lower map max min pprint
//   reject rejectattr replace reverse round safe select selectattr slice sort string
//   striptags sum title tojson trim truncate unique upper wordcount
// Not provided: filesizeformat, groupby, random, urlencode, urlize, wordwrap, xmlattr.
// map/select/reject/selectattr/rejectattr/unique/items/batch/slice (and reverse of a
// list) return one-shot iterators like jinja2's generators: `|list` makes a list of them,
// `|length` and `|tojson` of one fail as in the reference (llama-cpp-deepseek-r1's tool cases).
// pprint gives repr() with dict keys sorted (Python's pprint also wraps lines past 80 columns).
#pragma once

#include <string_view>

#include "template/value.h"

namespace ubatch::jinja {

using FilterFn = Value (*)(State& st, const Value& input, CallArgs& args);

// The filter called `name`, or nullptr.
FilterFn find_filter(std::string_view name);

// jinja2's make_attrgetter: "a.b.0" looked up part by part with get_item (digits as ints).
Value attribute_path(State& st, Value item, const Value& attribute);

}  // namespace ubatch::jinja
