#include "bench/args.h"

#include <charconv>
#include <fmt/format.h>

namespace ubatch::bench {

namespace {

std::string trim(const std::string& s) {
  const size_t b = s.find_first_not_of(" \t");
  if (b == std::string::npos) return {};
  const size_t e = s.find_last_not_of(" \t");
  return s.substr(b, e - b + 1);
}

// Whole-string integer; false for anything else (signs other than a leading '-', spaces
// inside, decimals, overflow).
bool parse_int(const std::string& s, int64_t& out) {
  if (s.empty()) return false;
  const char* first = s.data();
  const char* last = s.data() + s.size();
  if (*first == '+') ++first;
  auto [ptr, ec] = std::from_chars(first, last, out);
  return ec == std::errc() && ptr == last && first != last;
}

}  // namespace

Result<std::vector<int64_t>> parse_int_list(const std::string& text, const std::string& what, int64_t min,
                                            int64_t max) {
  std::vector<int64_t> out;
  if (trim(text).empty()) return Status::error(fmt::format("{}: empty list", what));
  size_t start = 0;
  while (true) {
    const size_t comma = text.find(',', start);
    const std::string item = trim(text.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
    if (item.empty()) return Status::error(fmt::format("{}: empty item in '{}'", what, text));
    int64_t v = 0;
    if (!parse_int(item, v)) return Status::error(fmt::format("{}: '{}' is not an integer", what, item));
    if (v < min || v > max)
      return Status::error(fmt::format("{}: {} is outside [{}, {}]", what, v, min, max));
    out.push_back(v);
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return out;
}

Result<IntRange> parse_range(const std::string& text, const std::string& what, int64_t lo, int64_t hi) {
  const std::string t = trim(text);
  const size_t colon = t.find(':');
  const std::string a = trim(t.substr(0, colon));
  const std::string b = colon == std::string::npos ? a : trim(t.substr(colon + 1));
  if (a.empty() || b.empty())
    return Status::error(fmt::format("{}: expected MIN:MAX or N, got '{}'", what, text));
  IntRange r;
  if (!parse_int(a, r.min)) return Status::error(fmt::format("{}: '{}' is not an integer", what, a));
  if (!parse_int(b, r.max)) return Status::error(fmt::format("{}: '{}' is not an integer", what, b));
  if (r.min > r.max) return Status::error(fmt::format("{}: MIN {} is above MAX {}", what, r.min, r.max));
  if (r.min < lo || r.max > hi)
    return Status::error(fmt::format("{}: {}:{} is outside [{}, {}]", what, r.min, r.max, lo, hi));
  return r;
}

}  // namespace ubatch::bench
