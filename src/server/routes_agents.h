// The agents' APIs, as thin layers over the chat path (wire_format.h):
//   POST /v1/responses               OpenAI Responses API (responses_request.h, responses_api.h)
//   POST /v1/messages                Anthropic Messages API (messages_request.h, messages_api.h)
//   POST /v1/messages/count_tokens   {"input_tokens"}: the prompt tokens the same body's
//                                    /v1/messages request has (its usage.input_tokens)
// (also without the /v1 prefix). The Messages routes answer errors in Anthropic's shape;
// headers anthropic-version and anthropic-beta are accepted and not read.
#pragma once

#include "server/http/router.h"
#include "server/server_state.h"

namespace ubatch::server {

void register_agent_routes(http::Router& router, ServerState& state);

}  // namespace ubatch::server
