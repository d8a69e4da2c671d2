// OpenAI-style API errors: every failure the server answers before a response starts is
// one JSON object {"error": {"message", "type", "param", "code"}} with an HTTP status that
// says whose fault it is (docs/API.md lists them all).
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "server/http/response.h"

namespace ubatch::server {

struct ApiError {
  int status = 400;                          // HTTP status
  std::string message;                       // human-readable; names the field at fault
  std::string type = "invalid_request_error";  // OpenAI error type
  std::string param;                         // request field at fault ("" → null)
  std::string code;                          // machine-readable code ("" → null)
  int retry_after_s = 0;                     // Retry-After seconds (every 503 sends one: 0 → 1)
};

// Retry-After for a server that is draining: it never takes another request, and a restart
// (or a balancer's failover) takes seconds.
inline constexpr int kDrainingRetryAfterS = 5;

// 400 invalid_request_error for request field `param`.
ApiError invalid_request(std::string message, std::string param = {}, std::string code = "invalid_value");
// Other statuses with their types: 401 authentication_error, 404 not_found_error,
// 413 invalid_request_error (request_too_large), 500 server_error, 503 unavailable_error,
// 504 deadline_exceeded.
ApiError unauthorized(std::string message);
ApiError not_found(std::string message);
ApiError too_large(std::string message);
ApiError server_error(std::string message);
ApiError unavailable(std::string message, int retry_after_s = 1);
// 504 deadline_exceeded (type and code): the request's deadline passed before its first token.
ApiError deadline_exceeded(std::string message);
// 503 unavailable_error, code deadline_unattainable: refused at admission, the deadline
// cannot be met given the work ahead of it.
ApiError deadline_unattainable(std::string message);

// {"error": {...}} for e.
nlohmann::json error_json(const ApiError& e);

// Whose error shape a route answers in: OpenAI's {"error": {message, type, param, code}}, or
// the Anthropic Messages API's {"type": "error", "error": {"type", "message"}} (Anthropic API
// reference, "Errors": invalid_request_error 400, authentication_error 401, not_found_error
// 404, request_too_large 413, rate_limit_error 429, api_error 500, overloaded_error 503/529).
enum class ErrorShape { OpenAI, Anthropic };

// e in the given shape (OpenAI: error_json(e)).
nlohmann::json error_json(const ApiError& e, ErrorShape shape);

// Serializes JSON for the wire: never throws on strings that are not valid UTF-8 (invalid
// bytes become U+FFFD), so no model output or echoed input can crash a handler.
std::string dump_json(const nlohmann::json& j);

// Sets res to status + JSON body (Content-Type application/json).
void send_json(http::Response& res, int status, const nlohmann::json& body);
// Sets res to the error (status, JSON body, and retry_after()).
void send_error(http::Response& res, const ApiError& e);
// The same in `shape`.
void send_error(http::Response& res, const ApiError& e, ErrorShape shape);
// Sets Retry-After on res (RFC 9110 §10.2.3) when e is a 503 or has retry_after_s > 0:
// e.retry_after_s seconds, at least 1. Every 503 the server sends carries one.
void set_retry_after(http::Response& res, const ApiError& e);

}  // namespace ubatch::server
