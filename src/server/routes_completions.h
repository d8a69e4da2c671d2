// POST /v1/completions and POST /v1/chat/completions (also without the /v1 prefix):
// validate (json_request.h), submit to the engine, then answer with one JSON body or, with
// "stream": true, Server-Sent Events. A client that disconnects has its request cancelled.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "server/backend.h"
#include "server/http/router.h"
#include "server/server_state.h"
#include "server/wire_format.h"

namespace ubatch::server {

void register_completion_routes(http::Router& router, ServerState& state);

// Another API's route on the chat path (wire_format.h). The body is parsed and the model held
// as for /v1/chat/completions, errors answered in `shape`; off the I/O threads `translate`
// turns the body's text into a chat body (or refuses it), which is prepared exactly as a chat
// completion (template, tools, structured output, reasoning) and submitted; the translation's
// WireFormat answers. With `count`, nothing is generated: the answer (200) is count(parsed)
// once the prompt is rendered and tokenized.
using WireTranslate = std::function<WireTranslation(const std::string& text, const Backend& backend)>;
using WireCount = std::function<nlohmann::json(const ParsedRequest& parsed)>;
void handle_wire_request(ServerState& state, const std::shared_ptr<http::Exchange>& ex, ErrorShape shape,
                         WireTranslate translate, WireCount count = {});

}  // namespace ubatch::server
