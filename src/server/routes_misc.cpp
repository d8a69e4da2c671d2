#include "server/routes_misc.h"

#include <algorithm>
#include <limits>

#include "sched/engine.h"
#include "server/errors.h"
#include "server/json_request.h"
#include "server/model_route.h"
#include "server/openapi.h"
#include "server/prometheus.h"
#include "tokenizer/tokenizer.h"

namespace ubatch::server {

namespace {

using json = nlohmann::json;

// The loaded models' leases, in registry order (a look, not a use: the LRU order stays).
std::vector<ModelRegistry::Lease> loaded_models(ServerState& state) {
  std::vector<ModelRegistry::Lease> out;
  for (size_t i = 0; i < state.models->size(); ++i)
    if (ModelRegistry::Lease b = state.models->try_acquire(i, false)) out.push_back(std::move(b));
  return out;
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
  std::string reason;
  const ModelRegistry::Readiness ready = state.models->readiness(&reason);
  if (ready != ModelRegistry::Readiness::None) {
    // Loading: retry soon. No model: every model failed to load; a request could only fail
    // (a load balancer sends it elsewhere). The reason names each model and its error.
    const bool none = ready == ModelRegistry::Readiness::NoModel;
    ApiError e = unavailable(reason, none ? 10 : 1);
    if (none) e.code = "no_model";
    json body = error_json(e);
    body["status"] = none ? "no_model" : ready == ModelRegistry::Readiness::Loading ? "loading" : "draining";
    send_json(res, 503, body);
    return set_retry_after(res, e);
  }
  // Saturated: every loaded model's admission queue is full, the next request would get 503
  // queue_full. A load balancer's health check takes the replica out of rotation until one
  // has room again.
  const std::vector<ModelRegistry::Lease> loaded = loaded_models(state);
  const bool saturated = !loaded.empty() && std::all_of(loaded.begin(), loaded.end(), [](const auto& b) {
    return b->engine->queued() >= b->engine->config().max_queue;
  });
  if (saturated) {
    const sched::Engine& engine = *loaded.front()->engine;
    ApiError e = unavailable("saturated: the request queue is full (" + std::to_string(engine.queued()) +
                             " waiting, --max-queue " + std::to_string(engine.config().max_queue) + ")", 1);
    e.code = "saturated";
    json body = error_json(e);
    body["status"] = "saturated";
    send_json(res, 503, body);
    return set_retry_after(res, e);
  }
  send_json(res, 200, {{"status", "ok"}});
}

// One model as /v1/models lists it (row i of the registry).
json model_object(ServerState& state, const ModelRegistry::Row& r, size_t i, int64_t started_at) {
  json meta = {{"status", model_state_name(r.state)}, {"file_bytes", r.info.file_bytes},
               {"memory_bytes", r.info.memory_bytes}, {"architecture", r.info.arch},
               {"requests_active", r.in_use}, {"requests_waiting", r.waiting}};
  if (!r.error.empty()) meta["load_error"] = r.error;
  if (ModelRegistry::Lease b = state.models->try_acquire(i, false)) {
    meta["n_ctx"] = b->n_ctx;
    meta["kv_cells"] = b->kv_cells;
    meta["n_vocab"] = b->n_vocab;
    meta["chat_template"] = b->chat_template;
  }
  return {{"id", r.info.name}, {"object", "model"}, {"created", started_at}, {"owned_by", "ubatch"}, {"meta", meta}};
}

void models(ServerState& state, int64_t started_at, http::Response& res) {
  json data = json::array();
  const std::vector<ModelRegistry::Row> rows = state.models->rows();
  for (size_t i = 0; i < rows.size(); ++i) data.push_back(model_object(state, rows[i], i, started_at));
  send_json(res, 200, {{"object", "list"}, {"data", data}});
}

// "%2F" and the like decoded (clients may encode an id holding '/'); a bad escape stays as it is.
std::string percent_decoded_id(std::string_view s) {
  auto hex = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '%' && i + 2 < s.size() && hex(s[i + 1]) >= 0 && hex(s[i + 2]) >= 0) {
      out += static_cast<char>(hex(s[i + 1]) * 16 + hex(s[i + 2]));
      i += 2;
    } else {
      out += s[i];
    }
  }
  return out;
}

// GET /v1/models/{id} (OpenAI's models.retrieve): the model as listed, or 404 model_not_found.
void model_by_id(ServerState& state, int64_t started_at, std::string_view prefix, const http::Request& req,
                 http::Response& res) {
  const std::string id = percent_decoded_id(std::string_view(req.path).substr(prefix.size()));
  const std::vector<ModelRegistry::Row> rows = state.models->rows();
  for (size_t i = 0; i < rows.size(); ++i)
    if (rows[i].info.name == id) return send_json(res, 200, model_object(state, rows[i], i, started_at));
  send_error(res, model_not_found(*state.models, id));
}

void metrics(ServerState& state, http::Response& res) {
  ServerMetrics s;
  s.ready = state.models->serving();
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
  s.models_budget_bytes = state.models->budget_bytes();
  std::vector<ModelMetrics> models;
  const std::vector<ModelRegistry::Row> rows = state.models->rows();
  for (size_t i = 0; i < rows.size(); ++i) {
    ModelMetrics m;
    m.name = rows[i].info.name;
    m.state = rows[i].state;
    m.memory_bytes = rows[i].info.memory_bytes;
    m.loads = rows[i].loads;
    m.unloads = rows[i].unloads;
    m.waiting = rows[i].waiting;
    if (ModelRegistry::Lease b = state.models->try_acquire(i, false)) m.engine = b->engine->metrics();
    models.push_back(std::move(m));
  }
  res.set_content(render_prometheus(models, s), "text/plain; version=0.0.4; charset=utf-8");
  res.status = 200;
}

std::optional<ApiError> read_flag(const json& body, const char* key, bool& out) {
  auto it = body.find(key);
  if (it == body.end() || it->is_null()) return std::nullopt;
  if (!it->is_boolean()) return invalid_request(std::string("'") + key + "' must be a boolean", key, "invalid_type");
  out = it->get<bool>();
  return std::nullopt;
}

// The model a synchronous route's body names (model_route.h), loaded now; null with the error
// sent otherwise.
ModelRegistry::Lease body_model(ServerState& state, const json& body, http::Response& res) {
  std::string name;
  if (auto e = requested_model(body, name)) return send_error(res, *e), nullptr;
  ApiError error;
  ModelRegistry::Lease b = model_now(state, name, RequestKind::Completion, &error);
  if (!b) send_error(res, error);
  return b;
}

void tokenize(ServerState& state, const http::Request& req, http::Response& res) {
  json body;
  if (auto e = parse_json_body(req.body, body)) return send_error(res, *e);
  const ModelRegistry::Lease b = body_model(state, body, res);
  if (!b) return;
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
  json body;
  if (auto e = parse_json_body(req.body, body)) return send_error(res, *e);
  const ModelRegistry::Lease b = body_model(state, body, res);
  if (!b) return;
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
  for (const char* prefix : {"/v1/models/", "/models/"})
    router.get_prefix(prefix, [&state, started_at, prefix](const http::Request& req, http::Response& res) {
      model_by_id(state, started_at, prefix, req, res);
    });
  router.get("/metrics", [&state](const http::Request&, http::Response& res) { metrics(state, res); });
  router.get("/openapi.json", [](const http::Request&, http::Response& res) {
    res.set_content(std::string(openapi_json()), "application/json");
  });
  // Tokenizing up to --max-body bytes takes time: off the I/O threads.
  router.post_async("/tokenize", offloaded(state, [&state](const http::Request& req, http::Response& res) {
                      tokenize(state, req, res);
                    }));
  router.post_async("/detokenize", offloaded(state, [&state](const http::Request& req, http::Response& res) {
                      detokenize(state, req, res);
                    }));
}

}  // namespace ubatch::server
