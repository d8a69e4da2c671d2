// GET /health, GET /v1/models, GET /metrics, POST /tokenize, POST /detokenize.
#pragma once

#include <cstdint>

#include "server/http/router.h"
#include "server/server_state.h"

namespace ubatch::server {

// started_at: Unix seconds, the "created" of the model in /v1/models.
void register_misc_routes(http::Router& router, ServerState& state, int64_t started_at);

}  // namespace ubatch::server
