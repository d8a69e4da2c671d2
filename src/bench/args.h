// Parsing the list and range arguments of `ubatch bench` and `ubatch load`
// ("1,2,4", "32:256"). Errors are Status messages naming the option and the bad item.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"

namespace ubatch::bench {

// "1,2,4" (commas, optional spaces) → {1, 2, 4}. Every item must be an integer in
// [min, max]. Errors: empty list, empty item ("1,,2"), not a number ("x", "1.5", "2-4"),
// out of range. `what` names the option in messages (e.g. "--threads").
Result<std::vector<int64_t>> parse_int_list(const std::string& text, const std::string& what, int64_t min,
                                            int64_t max);

// An inclusive integer range.
struct IntRange {
  int64_t min = 0;
  int64_t max = 0;
};

// "MIN:MAX" (or "N" for N:N) with lo <= MIN <= MAX <= hi. Errors: missing part (":5", "5:"),
// not a number, MIN > MAX, outside [lo, hi].
Result<IntRange> parse_range(const std::string& text, const std::string& what, int64_t lo, int64_t hi);

}  // namespace ubatch::bench
