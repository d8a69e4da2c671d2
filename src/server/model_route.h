// How a route finds the model a request names (its "model" field) and holds it while it
// answers: resolve the name (model_registry.h: any name with one model; with several, the exact
// name, or the kind's default when the field is absent), then wait for the model to load
// when it is not loaded. Errors (OpenAI's shape, docs/API.md "Several models"):
//   404 model_not_found       several models and none has that name
//   400 invalid_type          "model" is not a string
//   503 model_loading         a model not loaded in time (Retry-After), or not yet attached
//   500 model_load_failed     its file failed to load
//   503 shutting down
// Internal to src/server/.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "server/errors.h"
#include "server/http/exchange.h"
#include "server/http/router.h"
#include "server/model_registry.h"
#include "server/server_state.h"

namespace ubatch::server {

// The requested name: body["model"] when a string, "" when absent or null; an error otherwise.
std::optional<ApiError> requested_model(const nlohmann::json& body, std::string& name);
// The 404 for a name no model has, listing the names served.
ApiError model_not_found(const ModelRegistry& models, const std::string& name);

// Async routes: answers the error itself, or calls `next` on the exchange's strand with a lease
// on the model (loading it first; the wait ends at the request's deadline_ms when it has one,
// else after ServerConfig::model_wait_s).
// `shape`: the error shape of the route (errors.h).
void with_model(ServerState& state, const std::shared_ptr<http::Exchange>& ex, const nlohmann::json& body,
                RequestKind kind, std::function<void(ModelRegistry::Lease)> next, ErrorShape shape = ErrorShape::OpenAI);

// Async routes with a JSON body: parses it off the I/O threads (request_workers.h; an error is
// answered), then as with_model; `next` gets the body's text and its parse.
using BodyNext = std::function<void(const std::shared_ptr<http::Exchange>& ex, std::shared_ptr<const std::string> text,
                                    std::shared_ptr<const nlohmann::json> body, ModelRegistry::Lease lease)>;
void with_body_and_model(ServerState& state, const std::shared_ptr<http::Exchange>& ex, RequestKind kind,
                         BodyNext next, ErrorShape shape = ErrorShape::OpenAI);

// A synchronous handler run off the I/O threads (request_workers.h): for routes whose work may
// take more than a few milliseconds (tokenize, detokenize, apply-template).
http::AsyncHandler offloaded(ServerState& state, http::Handler handler);

// Synchronous routes (tokenize, templates, dashboard): a lease on the named model when it is
// loaded now; else null with the error in *error (a route never waits for a load).
ModelRegistry::Lease model_now(ServerState& state, const std::string& name, RequestKind kind, ApiError* error);

}  // namespace ubatch::server
