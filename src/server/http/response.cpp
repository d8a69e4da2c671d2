#include "server/http/response.h"

#include <fmt/format.h>

namespace ubatch::server::http {

namespace {
std::string clean(std::string s) {
  std::erase_if(s, [](char c) { return c == '\r' || c == '\n' || c == '\0'; });
  return s;
}
bool has_body(int status) { return status >= 200 && status != 204 && status != 304; }
}  // namespace

void Response::set_header(std::string name, std::string value) {
  name = clean(std::move(name));
  headers.erase(name);
  headers.emplace(std::move(name), clean(std::move(value)));
}

const char* status_reason(int status) {
  switch (status) {
    case 100: return "Continue";
    case 200: return "OK";
    case 204: return "No Content";
    case 400: return "Bad Request";
    case 401: return "Unauthorized";
    case 403: return "Forbidden";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 408: return "Request Timeout";
    case 411: return "Length Required";
    case 413: return "Content Too Large";
    case 414: return "URI Too Long";
    case 417: return "Expectation Failed";
    case 429: return "Too Many Requests";
    case 431: return "Request Header Fields Too Large";
    case 499: return "Client Closed Request";
    case 500: return "Internal Server Error";
    case 501: return "Not Implemented";
    case 503: return "Service Unavailable";
    case 504: return "Gateway Timeout";
    case 505: return "HTTP Version Not Supported";
    default: return "Unknown";
  }
}

std::string serialize_head(const Response& res, Framing framing, size_t body_length, bool keep_alive) {
  std::string out = fmt::format("HTTP/1.1 {} {}\r\n", res.status, status_reason(res.status));
  for (const auto& [name, value] : res.headers) {
    if (iequals(name, "Content-Length") || iequals(name, "Transfer-Encoding") || iequals(name, "Connection")) continue;
    out += name;
    out += ": ";
    out += value;
    out += "\r\n";
  }
  if (framing == Framing::Chunked)
    out += "Transfer-Encoding: chunked\r\n";
  else if (framing == Framing::Length && has_body(res.status))
    out += fmt::format("Content-Length: {}\r\n", body_length);
  if (framing == Framing::UntilClose) keep_alive = false;
  out += keep_alive ? "Connection: keep-alive\r\n\r\n" : "Connection: close\r\n\r\n";
  return out;
}

}  // namespace ubatch::server::http
