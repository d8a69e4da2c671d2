// Other APIs' wire formats over the chat path: one request model, three wire formats. A route
// of another API (POST /v1/responses, POST /v1/messages) translates its body into a
// /v1/chat/completions body (responses_request.h, messages_request.h), which is then parsed,
// rendered, constrained and scheduled exactly as a chat completion (routes_completions.cpp);
// a WireFormat turns what the chat path answers — the chat.completion body, or the stream of
// chat.completion.chunk objects — into the other API's body or events.
// Internal to src/server/.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "sched/request.h"
#include "server/errors.h"
#include "server/json_request.h"

namespace ubatch::server {

class WireFormat {
 public:
  virtual ~WireFormat() = default;
  // The error shape of the API (errors before and instead of a response).
  virtual ErrorShape error_shape() const = 0;
  // The chat request as parsed, before it is submitted (prompt tokens, stop strings).
  virtual void prepared(const ParsedRequest& parsed) { (void)parsed; }
  // Every engine event, before the chat path shapes it (Token, Finish, Done).
  virtual void observe(const sched::Event& e) { (void)e; }
  // Unstreamed: the chat.completion body (one choice) → this API's body.
  virtual nlohmann::json response(const nlohmann::json& chat, const sched::Event& done) = 0;
  // Streamed: the frames that open the stream (sent with its first token).
  virtual std::string stream_begin() = 0;
  // Streamed: one chat.completion.chunk → this API's frames ("" when none).
  virtual std::string stream_chunk(const nlohmann::json& chunk) = 0;
  // Streamed: the closing frames, from the Done event (usage).
  virtual std::string stream_end(const sched::Event& done) = 0;
  // Streamed: the last frame of a stream cut by an error after its head was sent.
  virtual std::string stream_error(const ApiError& e) = 0;
};

// A body of another API translated for the chat path.
struct WireTranslation {
  std::optional<ApiError> error;      // the request is refused (in the API's own shape)
  std::string chat_text;              // the /v1/chat/completions body, as JSON text
  std::shared_ptr<WireFormat> wire;   // answers in the API's format
};

}  // namespace ubatch::server
