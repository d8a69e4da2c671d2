// The global functions of the reference environment (transformers' chat-template globals on
// top of jinja2's defaults):
//   namespace(**kw) / namespace(mapping)   a Namespace (objects.h)
//   raise_exception(msg)                   stops the render with kRaiseException, msg verbatim
//   strftime_now(fmt)                      the render's clock (RenderContext::now) formatted
//   range([start,] stop[, step])           a list of ints (Python's range; at most the list limit)
//   dict(mapping_or_pairs?, **kw), dict.fromkeys(keys, value=None)
//   joiner(sep=", "), cycler(*items)
// jinja2's `lipsum` (random text) is not provided: a template calling it gets "'lipsum' is
// undefined".
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "template/value.h"

namespace ubatch::jinja {

// The globals, as (name, callable) pairs; shared, immutable function objects.
const std::vector<std::pair<std::string, Value>>& global_functions();
// `dict.fromkeys` as a callable.
Value dict_fromkeys_method();

}  // namespace ubatch::jinja
