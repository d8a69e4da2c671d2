// strftime for the `strftime_now` global (transformers: datetime.now().strftime(fmt)), done
// here rather than by the C library so that the output depends on nothing but the date: C
// locale names ("Sun", "July"), naive time (%z and %Z empty, %f "000000"), and the glibc
// extensions Python passes through on Linux: flags "-" (no padding), "_" (space padding),
// "0", "^" (upper case), and %e %k %l %C %D %F %T %R %r %h %n %t %u %V %G %g %s-less set.
// Unknown directives are copied as written.
#pragma once

#include <ctime>
#include <string>
#include <string_view>

namespace ubatch::jinja {

// A broken-down date with tm_wday and tm_yday computed (proleptic Gregorian; no time zone).
std::tm make_date(int year, int month, int day, int hour = 0, int minute = 0, int second = 0);
std::string py_strftime(const std::tm& t, std::string_view fmt);

}  // namespace ubatch::jinja
