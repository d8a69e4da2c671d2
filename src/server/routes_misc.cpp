#include "server/routes_misc.h"

#include <algorithm>
#include <limits>

#include "sched/engine.h"
#include "server/errors.h"
#include "server/json_request.h"
#include "server/openapi.h"
#include "server/prometheus.h"
#include "tokenizer/tokenizer.h"

namespace ubatch::server {

namespace {

using json = nlohmann::json;

const Backend* require_backend(ServerState& state, http::Response& res) {
  const Backend* b = state.backend.load();
  if (!b) send_error(res, unavailable("the model is loading; retry shortly", 1));
  return b;
}

void health(ServerState& state, http::Response& res) {
  if (state.draining) {
    // Shutting down: a load balancer takes the server out while running requests finish.
    ApiError e = unavailable("the server is shutting down", kDrainingRetryAfterS);
    json body = error_json(e);
    body["status"] = "draining";
    send_json(res, 503, body);
    return set_retry_after(res, e);
  }
  if (!state.backend.load()) {
    ApiError e = unavailable("the model is loading", 1);
    json body = error_json(e);
    body["status"] = "loading";
    send_json(res, 503, body);
    return set_retry_after(res, e);
  }
  // Saturated: the admission queue is full, the next request would get 503 queue_full. A
  // load balancer's health check takes the replica out of rotation until it has room again.
  const sched::Engine& engine = *state.backend.load()->engine;
  if (const int64_t queued = engine.queued(); queued >= engine.config().max_queue) {
    ApiError e = unavailable("saturated: the request queue is full (" + std::to_string(queued) + " waiting, --max-queue " +
                             std::to_string(engine.config().max_queue) + ")", 1);
    e.code = "saturated";
    json body = error_json(e);
    body["status"] = "saturated";
    send_json(res, 503, body);
    return set_retry_after(res, e);
  }
  send_json(res, 200, {{"status", "ok"}});
}

void models(ServerState& state, int64_t started_at, http::Response& res) {
  json model = {{"id", state.config.model_name}, {"object", "model"}, {"created", started_at}, {"owned_by", "ubatch"}};
  if (const Backend* b = state.backend.load())
    model["meta"] = {{"n_ctx", b->n_ctx}, {"kv_cells", b->kv_cells}, {"n_vocab", b->n_vocab}, {"chat_template", b->chat_template}};
  send_json(res, 200, {{"object", "list"}, {"data", json::array({model})}});
}

void metrics(ServerState& state, http::Response& res) {
  ServerMetrics s;
  const Backend* b = state.backend.load();
  s.ready = b != nullptr;
  {
    std::lock_guard<std::mutex> lock(state.counters.mutex);
    s.responses_by_status = state.counters.responses_by_status;
  }
  s.disconnects = state.counters.disconnects.load();
  s.streams_active = state.counters.streams_active.load();
  s.draining = state.draining.load();
  if (const http::TransportStats* t = state.transport) {
    s.connections_open = std::max<int64_t>(0, t->connections_open.load());
    s.connections_accepted = t->connections_accepted.load();
    s.connections_refused = t->connections_refused.load();
    s.timeouts_idle = t->timeouts_idle.load();
    s.timeouts_header = t->timeouts_header.load();
    s.timeouts_body = t->timeouts_body.load();
    s.timeouts_send = t->timeouts_send.load();
    s.slow_clients = t->slow_clients.load();
    s.bad_requests = t->bad_requests.load();
  }
  if (b) {
    const sched::MetricsSnapshot m = b->engine->metrics();
    res.set_content(render_prometheus(&m, s), "text/plain; version=0.0.4; charset=utf-8");
  } else {
    res.set_content(render_prometheus(nullptr, s), "text/plain; version=0.0.4; charset=utf-8");
  }
  res.status = 200;
}

std::optional<ApiError> read_flag(const json& body, const char* key, bool& out) {
  auto it = body.find(key);
  if (it == body.end() || it->is_null()) return std::nullopt;
  if (!it->is_boolean()) return invalid_request(std::string("'") + key + "' must be a boolean", key, "invalid_type");
  out = it->get<bool>();
  return std::nullopt;
}

void tokenize(ServerState& state, const http::Request& req, http::Response& res) {
  const Backend* b = require_backend(state, res);
  if (!b) return;
  json body;
  if (auto e = parse_json_body(req.body, body)) return send_error(res, *e);
  auto content = body.find("content");
  if (content == body.end() || !content->is_string())
    return send_error(res, invalid_request("'content' must be a string", "content", "invalid_type"));
  bool add_special = false, parse_special = true, with_pieces = false;
  for (auto [key, flag] : {std::pair{"add_special", &add_special}, std::pair{"parse_special", &parse_special},
                           std::pair{"with_pieces", &with_pieces}})
    if (auto e = read_flag(body, key, *flag)) return send_error(res, *e);
  const std::vector<int32_t> ids = b->tokenizer->tokenize(content->get<std::string>(), add_special, parse_special);
  json tokens = json::array();
  for (int32_t id : ids) {
    if (!with_pieces) {
      tokens.push_back(id);
      continue;
    }
    Utf8StreamDecoder d;
    std::string piece = d.push(b->tokenizer->token_to_piece(id, true));
    piece += d.flush();
    tokens.push_back({{"id", id}, {"piece", piece}});
  }
  send_json(res, 200, {{"tokens", tokens}});
}

void detokenize(ServerState& state, const http::Request& req, http::Response& res) {
  const Backend* b = require_backend(state, res);
  if (!b) return;
  json body;
  if (auto e = parse_json_body(req.body, body)) return send_error(res, *e);
  auto tokens = body.find("tokens");
  if (tokens == body.end() || !tokens->is_array())
    return send_error(res, invalid_request("'tokens' must be an array of token ids", "tokens", "invalid_type"));
  std::vector<int32_t> ids;
  for (size_t i = 0; i < tokens->size(); ++i) {
    const json& t = (*tokens)[i];
    if (!t.is_number_integer())
      return send_error(res, invalid_request("'tokens' must be an array of token ids", "tokens", "invalid_type"));
    const bool negative = !t.is_number_unsigned() && t.get<int64_t>() < 0;
    const uint64_t v = negative ? 0 : t.get<uint64_t>();
    if (negative || v >= static_cast<uint64_t>(b->n_vocab))
      return send_error(res, invalid_request("'tokens': token id " + t.dump() + " at index " + std::to_string(i) +
                                                 " is outside the vocabulary [0, " + std::to_string(b->n_vocab) + ")",
                                             "tokens", "invalid_token"));
    ids.push_back(static_cast<int32_t>(v));
  }
  Utf8StreamDecoder d;  // the ids may end inside a character: complete the text with U+FFFD
  std::string text = d.push(b->tokenizer->detokenize(ids));
  text += d.flush();
  send_json(res, 200, {{"content", text}});
}

}  // namespace

void register_misc_routes(http::Router& router, ServerState& state, int64_t started_at) {
  router.get("/health", [&state](const http::Request&, http::Response& res) { health(state, res); });
  router.get("/v1/health", [&state](const http::Request&, http::Response& res) { health(state, res); });
  auto list = [&state, started_at](const http::Request&, http::Response& res) { models(state, started_at, res); };
  router.get("/v1/models", list);
  router.get("/models", list);
  router.get("/metrics", [&state](const http::Request&, http::Response& res) { metrics(state, res); });
  router.get("/openapi.json", [](const http::Request&, http::Response& res) {
    res.set_content(std::string(openapi_json()), "application/json");
  });
  router.post("/tokenize", [&state](const http::Request& req, http::Response& res) { tokenize(state, req, res); });
  router.post("/detokenize",
              [&state](const http::Request& req, http::Response& res) { detokenize(state, req, res); });
}

}  // namespace ubatch::server
