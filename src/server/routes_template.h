// POST /apply-template (also /v1/apply-template): the prompt a chat request would give the
// model, without generating — llama-server's endpoint and shape:
//   {"messages", "tools"?, "tool_choice"?, "parallel_tool_calls"?, "chat_template_kwargs"?}
//   → {"prompt": "<text>", "tool_format": "<id>" | null}
// The text is the rendered template (BOS text included where the template writes it; the
// BOS the tokenizer adds is not), with the tool-call markup the request's grammar prefills.
// Errors: those of chat requests (chat_request.h, template errors: 400 "template_error").
#pragma once

#include "server/http/router.h"
#include "server/server_state.h"

namespace ubatch::server {

void register_template_routes(http::Router& router, ServerState& state);

}  // namespace ubatch::server
