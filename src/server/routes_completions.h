// POST /v1/completions and POST /v1/chat/completions (also without the /v1 prefix):
// validate (json_request.h), submit to the engine, then answer with one JSON body or, with
// "stream": true, Server-Sent Events. A client that disconnects has its request cancelled.
#pragma once

#include "common/httplib_include.h"
#include "server/server_state.h"

namespace ubatch::server {

void register_completion_routes(httplib::Server& http, ServerState& state);

}  // namespace ubatch::server
