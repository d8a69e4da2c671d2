#include "server/http_server.h"

#include <cctype>
#include <chrono>
#include <ctime>
#include <optional>
#include <random>
#include <thread>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "sched/engine.h"
#include "server/errors.h"
#include "server/http/server.h"
#include "server/routes_agents.h"
#include "server/routes_completions.h"
#include "server/routes_embeddings.h"
#include "server/routes_misc.h"
#include "server/routes_template.h"
#include "server/routes_webui.h"
#include "server/server_state.h"
#include "tokenizer/tokenizer.h"

namespace ubatch::server {

namespace {

// Same bytes, compared in time that does not depend on where they differ.
bool equal_constant_time(const std::string& a, const std::string& b) {
  if (a.size() != b.size()) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < a.size(); ++i) diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  return diff == 0;
}

bool authorized(const http::Request& req, const std::string& key) {
  const std::string auth = req.get_header_value("Authorization");
  // The auth scheme is case-insensitive (RFC 9110 §11.1).
  static const std::string kBearer = "bearer ";
  bool bearer = auth.size() > kBearer.size();
  for (size_t i = 0; bearer && i < kBearer.size(); ++i)
    bearer = std::tolower(static_cast<unsigned char>(auth[i])) == kBearer[i];
  if (bearer) return equal_constant_time(auth.substr(kBearer.size()), key);
  const std::string x = req.get_header_value("X-Api-Key");
  return !x.empty() && equal_constant_time(x, key);
}

// The JSON error for a status the transport decides itself.
ApiError transport_error(int status, const std::string& message) {
  ApiError e;
  switch (status) {
    case 404: return not_found(message);
    case 413: return too_large(message);
    case 400: return invalid_request(message, "", "malformed_http");
    case 408:
      e = invalid_request(message, "", "request_timeout");
      break;
    case 431:
      e = invalid_request(message, "", "request_header_too_large");
      break;
    default:
      e = status >= 500 ? server_error(message) : invalid_request(message);
      break;
  }
  e.status = status;
  return e;
}

http::Limits transport_limits(const ServerConfig& c) {
  http::Limits l;
  l.io_threads = std::max(1, c.http_threads);
  l.max_connections = std::max<size_t>(1, c.max_connections);
  l.max_header_bytes = c.max_header;
  l.max_body_bytes = c.max_body;
  l.idle_timeout_s = std::max(c.keep_alive_timeout_s, 1);
  l.header_timeout_s = c.header_timeout_s;
  l.body_timeout_s = c.body_timeout_s;
  l.send_timeout_s = c.send_timeout_s;
  l.stream_buffer_bytes = c.stream_buffer;
  return l;
}

}  // namespace

struct HttpServer::Impl {
  explicit Impl(ServerConfig config) : state(std::move(config)) {}
  ServerState state;
  std::unique_ptr<http::Server> http;
  Status cors_error = Status::ok();
  int port = -1;
  bool started = false;
  bool stopped = false;
};

HttpServer::HttpServer(ServerConfig config) : impl_(std::make_unique<Impl>(std::move(config))) {
  ServerState& st = impl_->state;
  st.id_salt = fmt::format("{:06x}", std::random_device{}() & 0xFFFFFF);

  Result<http::CorsPolicy> cors = http::CorsPolicy::parse(st.config.cors_origins);
  if (!cors) impl_->cors_error = cors.status();

  http::Router router;
  register_completion_routes(router, st);
  register_agent_routes(router, st);
  register_embedding_routes(router, st);
  register_misc_routes(router, st, static_cast<int64_t>(std::time(nullptr)));
  register_template_routes(router, st);
  if (st.config.webui) register_webui_routes(router, st);

  http::Hooks hooks;
  hooks.check = [&st](const http::Request& req) -> std::optional<http::Response> {
    if (st.config.api_key.empty() || req.path == "/health" || req.path == "/v1/health" ||
        (st.config.webui && is_webui_public_path(req.path)))
      return std::nullopt;
    if (authorized(req, st.config.api_key)) return std::nullopt;
    http::Response res;
    // The Anthropic Messages routes answer in Anthropic's error shape (and read x-api-key too).
    const bool anthropic = req.path.starts_with("/v1/messages") || req.path.starts_with("/messages");
    send_error(res, unauthorized("missing or wrong API key (send \"Authorization: Bearer <key>\" or \"x-api-key: <key>\")"),
               anthropic ? ErrorShape::Anthropic : ErrorShape::OpenAI);
    res.set_header("WWW-Authenticate", "Bearer");
    return res;
  };
  hooks.error = [](int status, const std::string& message, const http::Request* req) {
    http::Response res;
    const bool anthropic = req && (req->path.starts_with("/v1/messages") || req->path.starts_with("/messages"));
    send_error(res, transport_error(status, message), anthropic ? ErrorShape::Anthropic : ErrorShape::OpenAI);
    return res;
  };
  hooks.on_response = [&st](const http::Request& req, int status) {
    {
      std::lock_guard<std::mutex> lock(st.counters.mutex);
      st.counters.responses_by_status[status]++;
    }
    spdlog::debug("{} {} {} → {}", req.remote_addr, req.method, req.path, status);
  };
  impl_->http = std::make_unique<http::Server>(transport_limits(st.config), cors ? std::move(cors.value()) : http::CorsPolicy(),
                                               std::move(router), std::move(hooks));
  st.transport = &impl_->http->stats();
}

HttpServer::~HttpServer() { stop(); }

Result<int> HttpServer::bind() {
  if (!impl_->cors_error) return impl_->cors_error;
  if (impl_->port >= 0) return impl_->port;
  const ServerConfig& c = impl_->state.config;
  Result<int> port = impl_->http->bind(c.host, c.port);
  if (port) impl_->port = port.value();
  return port;
}

Status HttpServer::start() {
  if (impl_->port < 0) return Status::error("serve: start() before bind()");
  if (impl_->started) return Status::error("serve: already started");
  impl_->started = true;
  return impl_->http->start();
}

void HttpServer::set_backend(sched::Engine& engine, const Tokenizer& tokenizer) {
  impl_->state.models->attach(engine, tokenizer);
}

Status HttpServer::serve_models(std::vector<ModelInfo> models, ModelLoader loader, RegistryOptions options) {
  if (impl_->started) return Status::error("serve: serve_models() after start()");
  if (models.empty()) return Status::error("serve: no model to serve");
  if (options.chat_template.empty()) options.chat_template = impl_->state.config.chat_template;
  auto registry = std::make_unique<ModelRegistry>(std::move(models), std::move(loader), std::move(options));
  if (Status s = registry->check(); !s) return s;
  impl_->state.models = std::move(registry);
  return Status::ok();
}

Status HttpServer::preload_models() { return impl_->state.models->preload(); }

std::vector<std::pair<std::string, sched::MetricsSnapshot>> HttpServer::model_metrics() const {
  std::vector<std::pair<std::string, sched::MetricsSnapshot>> out;
  ModelRegistry& models = *impl_->state.models;
  for (size_t i = 0; i < models.size(); ++i)
    if (ModelRegistry::Lease b = models.try_acquire(i)) out.emplace_back(b->name, b->engine->metrics());
  return out;
}

void HttpServer::drain() {
  impl_->state.draining = true;
  impl_->state.on_drain.notify_all();  // endless responses (dashboard streams) end now
  impl_->http->drain();
}

int64_t HttpServer::requests_in_flight() const {
  return std::max<int64_t>(0, impl_->http->stats().exchanges_active.load());
}

bool HttpServer::wait_idle(std::chrono::milliseconds timeout) {
  const auto until = std::chrono::steady_clock::now() + timeout;
  while (requests_in_flight() > 0) {
    if (std::chrono::steady_clock::now() >= until) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return true;
}

void HttpServer::stop() {
  if (impl_->stopped) return;
  impl_->stopped = true;
  impl_->state.draining = true;
  impl_->state.stopping = true;  // handlers answering from now on end their requests at once
  impl_->state.models->stop();   // requests waiting for a model to load get 503
  impl_->http->stop();
  impl_->state.workers->stop();  // request work under way ends (its answers went out above)
}

int HttpServer::port() const { return impl_->port; }
const ServerConfig& HttpServer::config() const { return impl_->state.config; }

}  // namespace ubatch::server
