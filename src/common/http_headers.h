// HTTP header fields as the server (src/server/http/) and the bench client (src/bench/) hold
// them: a multimap whose names compare case-insensitively (RFC 9110 §5.1), values as sent.
#pragma once

#include <algorithm>
#include <cctype>
#include <map>
#include <string>
#include <string_view>

namespace ubatch {

// ASCII case-insensitive ordering of header names.
struct HeaderNameLess {
  bool operator()(std::string_view a, std::string_view b) const {
    return std::lexicographical_compare(a.begin(), a.end(), b.begin(), b.end(), [](char x, char y) {
      return std::tolower(static_cast<unsigned char>(x)) < std::tolower(static_cast<unsigned char>(y));
    });
  }
  using is_transparent = void;
};

using HttpHeaders = std::multimap<std::string, std::string, HeaderNameLess>;

// True when a and b are equal ignoring ASCII case.
inline bool iequals(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return std::tolower(static_cast<unsigned char>(x)) == std::tolower(static_cast<unsigned char>(y));
         });
}

}  // namespace ubatch
