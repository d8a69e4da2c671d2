// Cross-Origin Resource Sharing for the API (WHATWG Fetch standard, "CORS protocol"): which
// web origins may call the server from a browser, and the preflight answer.
//
// Policy: off by default (no Access-Control-* field is ever sent). With origins configured
// (`--cors-origin`), a request whose Origin is allowed gets Access-Control-Allow-Origin on
// every response (errors included), and a preflight (OPTIONS with Origin and
// Access-Control-Request-Method) gets 204 with the allowed methods, the requested headers and
// a max age. Preflights never need the API key: browsers send them without credentials.
// Credentials mode (cookies) is not supported: the API authenticates with a bearer key.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "server/http/request.h"
#include "server/http/response.h"

namespace ubatch::server::http {

class CorsPolicy {
 public:
  CorsPolicy() = default;  // off
  // `origins`: "*" (any origin) and/or exact origins "scheme://host[:port]" (compared
  // case-insensitively, no trailing slash). Each entry may itself be a comma-separated list.
  // Errors: an entry that is neither, naming it.
  static Result<CorsPolicy> parse(const std::vector<std::string>& origins);

  bool enabled() const { return any_ || !origins_.empty(); }
  bool allows(std::string_view origin) const;

  // Adds Access-Control-Allow-Origin ("*" when any origin is allowed, else the request's
  // Origin with Vary: Origin) and Access-Control-Expose-Headers when req carries an allowed
  // Origin. Does nothing otherwise.
  void decorate(const Request& req, Response& res) const;

  // True for a CORS preflight: OPTIONS with Origin and Access-Control-Request-Method.
  static bool is_preflight(const Request& req);

  // The answer to OPTIONS at a path the router knows (`allowed_methods` from
  // Router::allowed_methods): 204 with Allow; for a preflight from an allowed origin also
  // Access-Control-Allow-Methods, -Allow-Headers (those requested), -Max-Age (600 s).
  Response options(const Request& req, const std::string& allowed_methods) const;

 private:
  bool any_ = false;
  std::vector<std::string> origins_;  // lower-case
};

}  // namespace ubatch::server::http
