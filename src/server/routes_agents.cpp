#include "server/routes_agents.h"

#include <fmt/format.h>

#include "server/json_request.h"
#include "server/messages_api.h"
#include "server/messages_request.h"
#include "server/responses_api.h"
#include "server/responses_request.h"
#include "server/routes_completions.h"

namespace ubatch::server {

namespace agent_routes {

using json = nlohmann::json;
using ojson = nlohmann::ordered_json;

std::string next_id(ServerState& state, const char* prefix) {
  return fmt::format("{}_{}{:x}", prefix, state.id_salt, ++state.response_seq);
}

WireTranslation responses(ServerState& state, const std::string& text, const Backend& b) {
  WireTranslation t;
  ojson body, chat;
  if ((t.error = parse_ordered_members(text, kResponsesMembers, body))) return t;
  if ((t.error = responses_to_chat(body, chat))) return t;
  t.chat_text = chat.dump(-1, ' ', false, json::error_handler_t::replace);
  t.wire = make_responses_wire(next_id(state, "resp"), b.name, json::parse(body.dump()), b.tokenizer);
  return t;
}

WireTranslation messages(ServerState& state, const std::string& text, const Backend& b, bool count_only) {
  WireTranslation t;
  ojson body, chat;
  if ((t.error = parse_ordered_members(text, kMessagesMembers, body))) return t;
  if ((t.error = messages_to_chat(body, count_only, chat))) return t;
  t.chat_text = chat.dump(-1, ' ', false, json::error_handler_t::replace);
  if (!count_only) t.wire = make_messages_wire(next_id(state, "msg"), b.name, b.tokenizer);
  return t;
}

}  // namespace agent_routes

void register_agent_routes(http::Router& router, ServerState& state) {
  using namespace agent_routes;
  auto resp = [&state](const std::shared_ptr<http::Exchange>& ex) {
    handle_wire_request(state, ex, ErrorShape::OpenAI,
                        [&state](const std::string& text, const Backend& b) { return responses(state, text, b); });
  };
  auto msgs = [&state](const std::shared_ptr<http::Exchange>& ex) {
    handle_wire_request(state, ex, ErrorShape::Anthropic, [&state](const std::string& text, const Backend& b) {
      return messages(state, text, b, false);
    });
  };
  auto count = [&state](const std::shared_ptr<http::Exchange>& ex) {
    handle_wire_request(
        state, ex, ErrorShape::Anthropic,
        [&state](const std::string& text, const Backend& b) { return messages(state, text, b, true); },
        [](const ParsedRequest& p) { return json{{"input_tokens", p.request.prompt.size()}}; });
  };
  router.post_async("/v1/responses", resp);
  router.post_async("/responses", resp);
  router.post_async("/v1/messages", msgs);
  router.post_async("/messages", msgs);
  router.post_async("/v1/messages/count_tokens", count);
  router.post_async("/messages/count_tokens", count);
}

}  // namespace ubatch::server
