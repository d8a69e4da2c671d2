// POST /v1/completions and POST /v1/chat/completions (also without the /v1 prefix):
// validate (json_request.h), submit to the engine, then answer with one JSON body or, with
// "stream": true, Server-Sent Events. A client that disconnects has its request cancelled.
#pragma once

#include "server/http/router.h"
#include "server/server_state.h"

namespace ubatch::server {

void register_completion_routes(http::Router& router, ServerState& state);

}  // namespace ubatch::server
