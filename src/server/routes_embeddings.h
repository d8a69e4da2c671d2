// POST /v1/embeddings (also /embeddings): validate (embedding_request.h), submit one
// prefill-only engine request per input (sched::Request::pooling), and answer with OpenAI's
// list of vectors once every input is done. A client that disconnects has its inputs
// cancelled. Pooling: ServerConfig::pooling, else the model file's, else mean.
#pragma once

#include "server/http/router.h"
#include "server/server_state.h"

namespace ubatch::server {

void register_embedding_routes(http::Router& router, ServerState& state);

}  // namespace ubatch::server
