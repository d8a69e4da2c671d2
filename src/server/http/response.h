// One HTTP response as route handlers build it: status, header fields, and a whole body (for
// a streamed body see Exchange::start_stream). The connection adds the framing fields itself
// (Content-Length or Transfer-Encoding, Connection) and the CORS fields (cors.h).
#pragma once

#include <string>
#include <string_view>

#include "common/http_headers.h"

namespace ubatch::server::http {

struct Response {
  int status = 200;
  HttpHeaders headers;
  std::string body;

  // Sets the body and its Content-Type.
  void set_content(std::string content, std::string_view content_type) {
    body = std::move(content);
    set_header("Content-Type", std::string(content_type));
  }
  // Sets (replaces) a header field. CR, LF and NUL in the name or value are dropped: no
  // caller can split the response (RFC 9110 §5.5).
  void set_header(std::string name, std::string value);
  // The first value of header `name` (case-insensitive), "" when absent.
  std::string get_header_value(std::string_view name) const {
    auto it = headers.find(name);
    return it == headers.end() ? std::string() : it->second;
  }
};

// The reason phrase of a status ("OK", "Not Found", …; "Unknown" for codes it does not know).
const char* status_reason(int status);

// How the end of a response body is marked (RFC 9112 §6.3).
enum class Framing {
  Length,      // Content-Length: the body's exact size (every whole response)
  Chunked,     // Transfer-Encoding: chunked (a stream to an HTTP/1.1 client)
  UntilClose,  // neither: the body ends when the server closes the connection (a stream to an
               // HTTP/1.0 client, which knows no chunked coding); always with Connection: close
};

// "HTTP/1.1 <status> <reason>\r\n", the fields of res, then the framing: "Content-Length:
// <body_length>" (Length; not for a status that has no body: 1xx, 204, 304),
// "Transfer-Encoding: chunked" (Chunked) or nothing (UntilClose); "Connection: keep-alive" or
// "close" (always "close" for UntilClose); and the blank line. The framing and Connection
// fields of res.headers are never copied: the connection alone decides them.
std::string serialize_head(const Response& res, Framing framing, size_t body_length, bool keep_alive);

}  // namespace ubatch::server::http
