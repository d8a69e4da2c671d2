// The Responses API's answer (OpenAI API reference, "Responses": the response object and
// "Streaming events"), built from the chat path's answer (wire_format.h).
//
// The response object: {id: "resp_…", object: "response", created_at (Unix seconds), status
// ("completed", or "incomplete" with incomplete_details {reason: "max_output_tokens"} when the
// reply was cut by max_output_tokens), error: null, model, output: [items], usage
// {input_tokens, input_tokens_details {cached_tokens}, output_tokens, output_tokens_details
// {reasoning_tokens}, total_tokens} (tokens), and the request's instructions,
// max_output_tokens, temperature, top_p, tools, tool_choice, parallel_tool_calls, text,
// reasoning, metadata echoed; store false, previous_response_id null, truncation "disabled"}.
// Output items, in the order the model wrote them:
//   {type: "reasoning", id: "rs_…", summary: [], content: [{type: "reasoning_text", text}]}
//     (a thinking model's reasoning, chat's reasoning_content)
//   {type: "message", id: "msg_…", role: "assistant", status: "completed",
//    content: [{type: "output_text", text, annotations: [], logprobs: []}]}
//   {type: "function_call", id: "fc_…", call_id, name, arguments (JSON text), status: "completed"}
// Streamed (SSE frames "event: <type>\ndata: <json>", each with type and sequence_number from
// 0): response.created, response.in_progress, then per item response.output_item.added and
//   message:       response.content_part.added, response.output_text.delta …,
//                  response.output_text.done, response.content_part.done
//   reasoning:     response.content_part.added, response.reasoning_text.delta …,
//                  response.reasoning_text.done, response.content_part.done
//   function_call: response.function_call_arguments.delta …, response.function_call_arguments.done
// and response.output_item.done; last response.completed (or response.incomplete) with the
// whole response object. An error after the stream started: one "error" event
// {type: "error", code, message, param}. No [DONE] frame.
// Internal to src/server/.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "server/wire_format.h"

namespace ubatch {
class Tokenizer;
}

namespace ubatch::server {

// `id`: "resp_…"; `request`: the Responses body (fields echoed in the response object);
// `tokenizer` counts reasoning tokens (it must outlive the request's answer).
std::shared_ptr<WireFormat> make_responses_wire(std::string id, std::string model, nlohmann::json request,
                                                const Tokenizer* tokenizer);

}  // namespace ubatch::server
