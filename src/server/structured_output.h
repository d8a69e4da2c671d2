// Structured output fields of /v1/completions and /v1/chat/completions (docs/API.md,
// "Structured output"): OpenAI's `response_format` ({"type": "text" | "json_object" |
// "json_schema", "json_schema": {"name", "schema", "strict"}}), and the extensions `grammar`
// (GBNF text) and `json_schema` (a schema). At most one of them constrains a request.
//
// The body is read again as ordered JSON here, so an object schema's properties keep the
// order the client wrote them in (the order the model generates them). The grammar is
// compiled (or found in the engine's cache) before the request is queued, so an invalid
// grammar or an unsupported schema keyword is a 400 naming the position or keyword.
#pragma once

#include <cstddef>
#include <optional>
#include <string_view>

#include "server/errors.h"
#include "server/json_request.h"

namespace ubatch::grammar {
class GrammarCache;
}

namespace ubatch::server {

// Longest grammar (GBNF text) or JSON Schema (as compact JSON) a request may give; real ones
// are a few KiB. Compiling runs off the I/O threads (request_workers.h) but still takes a worker.
constexpr size_t kMaxConstraintBytes = 256 << 10;

// Sets out.request.grammar when the body asks for structured output. Errors (400): wrong
// types, an unknown response_format type, more than one constraint, a grammar or schema that
// does not compile (code "invalid_grammar" or "invalid_json_schema", param the field).
std::optional<ApiError> parse_structured_output(std::string_view body, grammar::GrammarCache& grammars,
                                                ParsedRequest& out);

}  // namespace ubatch::server
