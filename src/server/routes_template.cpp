#include "server/routes_template.h"

#include "server/errors.h"
#include "server/json_request.h"
#include "server/model_route.h"

namespace ubatch::server {

namespace {

void apply_template(ServerState& state, const http::Request& req, http::Response& res) {
  nlohmann::json body;
  if (auto e = parse_json_body(req.body, body)) return send_error(res, *e);
  std::string name;
  if (auto e = requested_model(body, name)) return send_error(res, *e);
  ApiError error;
  const ModelRegistry::Lease b = model_now(state, name, RequestKind::Chat, &error);
  if (!b) return send_error(res, error);
  if (!b->chat) return send_error(res, server_error("the chat template cannot be used: " + b->chat_template_error));
  nlohmann::ordered_json ordered;
  if (auto e = parse_ordered_members(req.body, kChatMembers, ordered))
    return send_error(res, *e);
  const ChatSetup setup{b->chat.get(), &ordered, state.config.reasoning_format};
  ParsedRequest parsed;
  SegmentedText prompt;
  if (auto e = render_chat_prompt(setup, *b->tokenizer, parsed, prompt)) return send_error(res, *e);
  nlohmann::json format;  // null: no calls are read
  if (parsed.tool_format)
    format = std::string(parsed.tool_format->id);
  else if (parsed.harmony && parsed.tools.active())
    format = "harmony";  // calls read from the reply's channels (chat/harmony.h)
  send_json(res, 200, {{"prompt", prompt.text}, {"tool_format", format}});
}

}  // namespace

void register_template_routes(http::Router& router, ServerState& state) {
  auto handler = [&state](const http::Request& req, http::Response& res) { apply_template(state, req, res); };
  // Rendering a template takes time: off the I/O threads.
  router.post_async("/apply-template", offloaded(state, handler));
  router.post_async("/v1/apply-template", offloaded(state, handler));
}

}  // namespace ubatch::server
