// The Anthropic Messages API's answer (Anthropic API reference, "Messages": the Message object
// and "Streaming Messages"), built from the chat path's answer (wire_format.h).
//
// The message: {id: "msg_…", type: "message", role: "assistant", model, content: [blocks],
// stop_reason ("end_turn"; "max_tokens" when cut by max_tokens; "stop_sequence" when one of
// stop_sequences ended it, named in stop_sequence; "tool_use" when it ends with tool calls),
// stop_sequence (string or null), usage {input_tokens, output_tokens, cache_read_input_tokens,
// cache_creation_input_tokens: 0} (tokens)}. Blocks, in the order the model wrote them:
//   {type: "thinking", thinking, signature: ""}   a thinking model's reasoning
//   {type: "text", text}
//   {type: "tool_use", id, name, input (object)}
// Streamed (SSE frames "event: <type>\ndata: <json>"): message_start {message (content [],
// usage.input_tokens)}, ping, then per block content_block_start {index, content_block},
// content_block_delta {index, delta: text_delta {text} | thinking_delta {thinking} |
// input_json_delta {partial_json}} …, content_block_stop {index}; then message_delta
// {delta {stop_reason, stop_sequence}, usage {output_tokens, input_tokens,
// cache_read_input_tokens}} and message_stop. An error after the stream started: one "error"
// event {type: "error", error {type, message}}.
// Internal to src/server/.
#pragma once

#include <memory>
#include <string>

#include "server/wire_format.h"

namespace ubatch {
class Tokenizer;
}

namespace ubatch::server {

// `id`: "msg_…"; `tokenizer` tells a stop sequence from an end of turn (it must outlive the
// request's answer).
std::shared_ptr<WireFormat> make_messages_wire(std::string id, std::string model, const Tokenizer* tokenizer);

}  // namespace ubatch::server
