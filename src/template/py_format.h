// Python's text formatting of numbers and strings, byte for byte where chat templates can
// see it (Python 3.11 semantics; C locale):
//  - float_repr: repr(float) — the shortest text that reads back to the same double, fixed
//    notation for exponents -4..15 with at least one digit after the point ("1.0", "0.0001",
//    "1e-05", "1e+16", "inf", "nan").
//  - format_spec: format(value, spec), the format mini-language of str.format:
//    [[fill]align][sign][#][0][width][,|_][.precision][type], types s d n b o x X c e E f F g G %.
//  - str_format: str.format(*args, **kwargs): "{}", "{0}", "{name}", "{0[key]}", "{x.attr}",
//    conversions !s !r !a, nested "{:{width}}" specs, "{{" / "}}".
//  - percent_format: the % operator: %s %r %a %d %i %u %o %x %X %e %E %f %F %g %G %c %%, flags
//    "-+ #0", width, precision ("*" too), and "%(name)s" with a dict.
// Formatting results carry marks: the format string's ranges keep theirs, each inserted value
// its own (strings) or data (anything else), as MarkedText documents.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "template/marked_text.h"
#include "template/value.h"

namespace ubatch::jinja {

std::string float_repr(double f);
// format(value, spec); throws kRuntime for a spec that does not apply ("Unknown format code").
std::string format_spec(const Value& v, std::string_view spec);
MarkedText str_format(State& st, const MarkedText& fmt, const CallArgs& args);
MarkedText percent_format(State& st, const MarkedText& fmt, const Value& args);

}  // namespace ubatch::jinja
