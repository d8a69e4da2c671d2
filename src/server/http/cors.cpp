#include "server/http/cors.h"

#include <algorithm>
#include <cctype>
#include <regex>

#include <fmt/format.h>

namespace ubatch::server::http {

namespace {

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

std::string trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return std::string(s);
}

// Header values that may be echoed: tokens and the separators of a field-name list.
bool safe_header_list(std::string_view s) {
  return std::all_of(s.begin(), s.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == ',' || c == ' ' || c == '.';
  });
}

}  // namespace

Result<CorsPolicy> CorsPolicy::parse(const std::vector<std::string>& origins) {
  static const std::regex origin_re(R"(^[a-z][a-z0-9+.-]*://([a-z0-9._~-]+|\[[0-9a-f:.]+\])(:[0-9]{1,5})?$)");
  CorsPolicy p;
  for (const std::string& entry : origins) {
    size_t start = 0;
    while (start <= entry.size()) {
      size_t comma = entry.find(',', start);
      if (comma == std::string::npos) comma = entry.size();
      const std::string o = lower(trim(std::string_view(entry).substr(start, comma - start)));
      start = comma + 1;
      if (o.empty()) continue;
      if (o == "*") {
        p.any_ = true;
      } else if (std::regex_match(o, origin_re)) {
        p.origins_.push_back(o);
      } else {
        return Status::error(fmt::format(
            "--cors-origin: '{}' is not an origin (expected '*' or scheme://host[:port], e.g. https://app.example.com)", o));
      }
    }
  }
  return p;
}

bool CorsPolicy::allows(std::string_view origin) const {
  if (origin.empty()) return false;
  if (any_) return true;
  const std::string o = lower(origin);
  return std::find(origins_.begin(), origins_.end(), o) != origins_.end();
}

void CorsPolicy::decorate(const Request& req, Response& res) const {
  if (!enabled()) return;
  const std::string origin = req.get_header_value("Origin");
  if (!allows(origin)) return;
  if (any_) {
    res.set_header("Access-Control-Allow-Origin", "*");
  } else {
    res.set_header("Access-Control-Allow-Origin", origin);
    res.set_header("Vary", "Origin");
  }
  res.set_header("Access-Control-Expose-Headers", "Retry-After, WWW-Authenticate");
}

bool CorsPolicy::is_preflight(const Request& req) {
  return req.method == "OPTIONS" && req.has_header("Origin") && req.has_header("Access-Control-Request-Method");
}

Response CorsPolicy::options(const Request& req, const std::string& allowed_methods) const {
  Response res;
  res.status = 204;
  res.set_header("Allow", allowed_methods);
  if (!is_preflight(req) || !allows(req.get_header_value("Origin"))) return res;
  res.set_header("Access-Control-Allow-Methods", allowed_methods);
  const std::string asked = req.get_header_value("Access-Control-Request-Headers");
  if (!asked.empty() && asked.size() <= 1024 && safe_header_list(asked))
    res.set_header("Access-Control-Allow-Headers", asked);
  res.set_header("Access-Control-Max-Age", "600");
  return res;
}

}  // namespace ubatch::server::http
