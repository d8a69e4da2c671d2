// One HTTP/1.1 request as the route handlers see it (src/server/http/): parsed by the
// connection (connection.h), body complete and de-chunked. Plain data, no I/O.
#pragma once

#include <string>
#include <string_view>

#include "common/http_headers.h"

namespace ubatch::server::http {

struct Request {
  std::string method;        // as sent ("GET", "POST", …; methods are case-sensitive, RFC 9110 §9.1)
  std::string target;        // the request-target as sent ("/v1/models?x=1")
  std::string path;          // target up to '?' (absolute-form targets: the path part); never decoded
  std::string query;         // after '?' ("" when none), undecoded
  int version = 11;          // 10 (HTTP/1.0) or 11 (HTTP/1.1)
  HttpHeaders headers;
  std::string body;          // the whole body, chunked framing removed (at most --max-body bytes)
  std::string remote_addr;   // peer address, numeric
  int remote_port = 0;

  // The first value of header `name` (case-insensitive), "" when absent.
  std::string get_header_value(std::string_view name) const {
    auto it = headers.find(name);
    return it == headers.end() ? std::string() : it->second;
  }
  bool has_header(std::string_view name) const { return headers.find(name) != headers.end(); }
};

}  // namespace ubatch::server::http
