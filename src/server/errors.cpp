#include "server/errors.h"

#include <algorithm>

namespace ubatch::server {

ApiError invalid_request(std::string message, std::string param, std::string code) {
  ApiError e;
  e.status = 400;
  e.message = std::move(message);
  e.param = std::move(param);
  e.code = std::move(code);
  return e;
}

namespace {
ApiError make(int status, std::string message, std::string type, std::string code) {
  ApiError e;
  e.status = status;
  e.message = std::move(message);
  e.type = std::move(type);
  e.code = std::move(code);
  return e;
}
}  // namespace

ApiError unauthorized(std::string message) {
  return make(401, std::move(message), "authentication_error", "invalid_api_key");
}
ApiError not_found(std::string message) { return make(404, std::move(message), "not_found_error", "not_found"); }
ApiError too_large(std::string message) {
  return make(413, std::move(message), "invalid_request_error", "request_too_large");
}
ApiError server_error(std::string message) { return make(500, std::move(message), "server_error", "internal_error"); }
ApiError unavailable(std::string message, int retry_after_s) {
  ApiError e = make(503, std::move(message), "unavailable_error", "unavailable");
  e.retry_after_s = retry_after_s;
  return e;
}

ApiError deadline_exceeded(std::string message) {
  ApiError e = make(504, std::move(message), "deadline_exceeded", "deadline_exceeded");
  e.param = "deadline_ms";
  return e;
}
ApiError deadline_unattainable(std::string message) {
  ApiError e = make(503, std::move(message), "unavailable_error", "deadline_unattainable");
  e.param = "deadline_ms";
  return e;
}

nlohmann::json error_json(const ApiError& e) {
  nlohmann::json err = {{"message", e.message}, {"type", e.type}};
  err["param"] = e.param.empty() ? nlohmann::json(nullptr) : nlohmann::json(e.param);
  err["code"] = e.code.empty() ? nlohmann::json(nullptr) : nlohmann::json(e.code);
  return {{"error", err}};
}

nlohmann::json error_json(const ApiError& e, ErrorShape shape) {
  if (shape == ErrorShape::OpenAI) return error_json(e);
  const char* type = "invalid_request_error";
  switch (e.status) {
    case 401: type = "authentication_error"; break;
    case 403: type = "permission_error"; break;
    case 404: type = "not_found_error"; break;
    case 413: type = "request_too_large"; break;
    case 429: type = "rate_limit_error"; break;
    case 503: type = "overloaded_error"; break;
    default: type = e.status >= 500 ? "api_error" : "invalid_request_error"; break;
  }
  return {{"type", "error"}, {"error", {{"type", type}, {"message", e.message}}}};
}

std::string dump_json(const nlohmann::json& j) {
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

void send_json(http::Response& res, int status, const nlohmann::json& body) {
  res.status = status;
  res.set_content(dump_json(body), "application/json");
}

void send_error(http::Response& res, const ApiError& e) {
  send_json(res, e.status, error_json(e));
  set_retry_after(res, e);
}

void send_error(http::Response& res, const ApiError& e, ErrorShape shape) {
  send_json(res, e.status, error_json(e, shape));
  set_retry_after(res, e);
}

void set_retry_after(http::Response& res, const ApiError& e) {
  if (e.status == 503 || e.retry_after_s > 0) res.set_header("Retry-After", std::to_string(std::max(1, e.retry_after_s)));
}

}  // namespace ubatch::server
