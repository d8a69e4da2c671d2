// GET /health, GET /v1/models, GET /metrics, POST /tokenize, POST /detokenize.
#pragma once

#include <cstdint>

#include "common/httplib_include.h"
#include "server/server_state.h"

namespace ubatch::server {

// started_at: Unix seconds, the "created" of the model in /v1/models.
void register_misc_routes(httplib::Server& http, ServerState& state, int64_t started_at);

}  // namespace ubatch::server
