// The Anthropic Messages wire format (messages_api.h).
#include "server/messages_api.h"

#include <vector>

#include "server/sse.h"
#include "tokenizer/tokenizer.h"

namespace ubatch::server {

namespace messages_out {

using json = nlohmann::json;

enum class BlockKind { None, Thinking, Text, ToolUse };

constexpr size_t kStopTailBytes = 4096;  // generated text kept to name the stop sequence that matched

json tool_input(const std::string& arguments) {
  json input = json::parse(arguments, nullptr, false);
  return input.is_object() ? input : json::object();
}

class MessagesWire : public WireFormat {
 public:
  MessagesWire(std::string id, std::string model, const Tokenizer* tokenizer)
      : id_(std::move(id)), model_(std::move(model)), tokenizer_(tokenizer) {}

  ErrorShape error_shape() const override { return ErrorShape::Anthropic; }

  void prepared(const ParsedRequest& parsed) override {
    stops_ = parsed.request.stop;
    prompt_tokens_ = static_cast<int64_t>(parsed.request.prompt.size());
  }

  // Which stop sequence ended the reply: the scheduler sends the token that completed a stop
  // string (an end-of-generation token ends a reply without a Token event).
  void observe(const sched::Event& e) override {
    if (stops_.empty() || !tokenizer_) return;
    if (e.kind == sched::Event::Kind::Token && e.token >= 0) {
      last_piece_ = tokenizer_->token_to_piece(e.token);
      tail_ += last_piece_;
      if (tail_.size() > kStopTailBytes) tail_.erase(0, tail_.size() - kStopTailBytes);
    } else if (e.kind == sched::Event::Kind::Finish && e.finish == sched::FinishReason::Stop && !last_piece_.empty()) {
      // The stop string ends inside the last token's piece.
      const size_t from = tail_.size() - std::min(tail_.size(), last_piece_.size());
      size_t best_end = 0;
      for (const std::string& s : stops_) {
        const size_t at = tail_.rfind(s);
        if (at == std::string::npos || at + s.size() <= from) continue;
        if (stop_sequence_.empty() || at + s.size() < best_end) {  // the first to complete
          best_end = at + s.size();
          stop_sequence_ = s;
        }
      }
    }
  }

  json response(const json& chat, const sched::Event& done) override {
    const json choice = chat["choices"].empty() ? json::object() : chat["choices"][0];
    const json message = choice.value("message", json::object());
    finish_ = choice.value("finish_reason", "stop");
    json content = json::array();
    if (auto r = message.find("reasoning_content"); r != message.end() && r->is_string())
      content.push_back({{"type", "thinking"}, {"thinking", *r}, {"signature", ""}});
    const std::string text = message.value("content", json()).is_string() ? message["content"].get<std::string>() : "";
    const json calls = message.value("tool_calls", json::array());
    if (!text.empty() || (calls.empty() && content.empty())) content.push_back({{"type", "text"}, {"text", text}});
    for (const json& c : calls)
      content.push_back({{"type", "tool_use"},
                         {"id", c.value("id", "")},
                         {"name", c["function"].value("name", "")},
                         {"input", tool_input(c["function"].value("arguments", ""))}});
    json m = message_object(content);
    m["stop_reason"] = stop_reason();
    m["stop_sequence"] = stop_reason() == "stop_sequence" ? json(stop_sequence_) : json(nullptr);
    m["usage"] = usage(done.usage);
    return m;
  }

  std::string stream_begin() override {
    json m = message_object(json::array());
    m["stop_reason"] = nullptr;
    m["stop_sequence"] = nullptr;
    m["usage"] = {{"input_tokens", prompt_tokens_}, {"output_tokens", 0}, {"cache_read_input_tokens", 0},
                  {"cache_creation_input_tokens", 0}};
    std::string out = event("message_start", {{"message", m}});
    out += event("ping", json::object());
    return out;
  }

  std::string stream_chunk(const json& chunk) override {
    std::string out;
    for (const json& c : chunk.value("choices", json::array())) {
      if (auto f = c.find("finish_reason"); f != c.end() && f->is_string()) finish_ = f->get<std::string>();
      const json delta = c.value("delta", json::object());
      if (auto r = delta.find("reasoning_content"); r != delta.end() && r->is_string() && !r->get<std::string>().empty())
        out += text_delta(BlockKind::Thinking, r->get<std::string>());
      if (auto t = delta.find("content"); t != delta.end() && t->is_string() && !t->get<std::string>().empty())
        out += text_delta(BlockKind::Text, t->get<std::string>());
      for (const json& call : delta.value("tool_calls", json::array())) {
        const json fn = call.value("function", json::object());
        if (call.contains("id")) {
          out += close_block();
          open_ = BlockKind::ToolUse;
          out += event("content_block_start", {{"index", index_},
                                               {"content_block",
                                                {{"type", "tool_use"},
                                                 {"id", call.value("id", "")},
                                                 {"name", fn.value("name", "")},
                                                 {"input", json::object()}}}});
        }
        const std::string args = fn.value("arguments", "");
        if (open_ == BlockKind::ToolUse && !args.empty())
          out += event("content_block_delta",
                       {{"index", index_}, {"delta", {{"type", "input_json_delta"}, {"partial_json", args}}}});
      }
    }
    return out;
  }

  std::string stream_end(const sched::Event& done) override {
    std::string out = close_block();
    if (index_ == 0) {  // nothing was written: an empty text block, as unstreamed
      out += event("content_block_start", {{"index", 0}, {"content_block", {{"type", "text"}, {"text", ""}}}});
      out += event("content_block_stop", {{"index", 0}});
    }
    const std::string reason = stop_reason();
    out += event("message_delta",
                 {{"delta", {{"stop_reason", reason},
                             {"stop_sequence", reason == "stop_sequence" ? json(stop_sequence_) : json(nullptr)}}},
                  {"usage", usage(done.usage)}});
    out += event("message_stop", json::object());
    return out;
  }

  std::string stream_error(const ApiError& e) override {
    json err = error_json(e, ErrorShape::Anthropic);
    return sse_event("error", err);
  }

 private:
  json message_object(json content) const {
    return {{"id", id_}, {"type", "message"}, {"role", "assistant"}, {"model", model_}, {"content", std::move(content)}};
  }

  std::string stop_reason() const {
    if (finish_ == "tool_calls") return "tool_use";
    if (finish_ == "length") return "max_tokens";
    if (!stop_sequence_.empty()) return "stop_sequence";
    return "end_turn";
  }

  static json usage(const sched::Usage& u) {
    return {{"input_tokens", u.prompt_tokens},
            {"output_tokens", u.completion_tokens},
            {"cache_read_input_tokens", u.cached_tokens},
            {"cache_creation_input_tokens", 0}};
  }

  static std::string event(const char* type, json data) {
    data["type"] = type;
    return sse_event(type, data);
  }

  std::string text_delta(BlockKind kind, const std::string& delta) {
    std::string out;
    const bool thinking = kind == BlockKind::Thinking;
    if (open_ != kind) {
      out += close_block();
      open_ = kind;
      out += event("content_block_start",
                   {{"index", index_},
                    {"content_block", thinking ? json{{"type", "thinking"}, {"thinking", ""}, {"signature", ""}}
                                               : json{{"type", "text"}, {"text", ""}}}});
    }
    out += event("content_block_delta",
                 {{"index", index_},
                  {"delta", thinking ? json{{"type", "thinking_delta"}, {"thinking", delta}}
                                     : json{{"type", "text_delta"}, {"text", delta}}}});
    return out;
  }

  std::string close_block() {
    if (open_ == BlockKind::None) return "";
    std::string out = event("content_block_stop", {{"index", index_}});
    open_ = BlockKind::None;
    ++index_;
    return out;
  }

  const std::string id_;
  const std::string model_;
  const Tokenizer* tokenizer_;
  std::vector<std::string> stops_;
  int64_t prompt_tokens_ = 0;
  std::string tail_, last_piece_;
  std::string stop_sequence_;    // the stop sequence that ended the reply ("" none)
  std::string finish_ = "stop";  // the chat finish_reason
  BlockKind open_ = BlockKind::None;
  int64_t index_ = 0;  // the open block's index (blocks closed so far)
};

}  // namespace messages_out

std::shared_ptr<WireFormat> make_messages_wire(std::string id, std::string model, const Tokenizer* tokenizer) {
  return std::make_shared<messages_out::MessagesWire>(std::move(id), std::move(model), tokenizer);
}

}  // namespace ubatch::server
