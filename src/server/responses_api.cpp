// The Responses wire format (responses_api.h).
#include "server/responses_api.h"

#include <ctime>
#include <vector>

#include "server/sse.h"
#include "tokenizer/tokenizer.h"

namespace ubatch::server {

namespace responses_out {

using json = nlohmann::json;

enum class ItemKind { None, Reasoning, Message, Call };

class ResponsesWire : public WireFormat {
 public:
  ResponsesWire(std::string id, std::string model, json request, const Tokenizer* tokenizer)
      : id_(std::move(id)),
        model_(std::move(model)),
        request_(std::move(request)),
        tokenizer_(tokenizer),
        created_(static_cast<int64_t>(std::time(nullptr))) {}

  ErrorShape error_shape() const override { return ErrorShape::OpenAI; }

  json response(const json& chat, const sched::Event& done) override {
    const json choice = chat["choices"].empty() ? json::object() : chat["choices"][0];
    const json message = choice.value("message", json::object());
    finish_ = choice.value("finish_reason", "stop");
    json output = json::array();
    if (auto r = message.find("reasoning_content"); r != message.end() && r->is_string()) {
      reasoning_text_ = r->get<std::string>();
      output.push_back(reasoning_item(item_id("rs", 0), reasoning_text_));
    }
    const std::string content = message.value("content", json()).is_string() ? message["content"].get<std::string>() : "";
    const json calls = message.value("tool_calls", json::array());
    if (!content.empty() || calls.empty()) output.push_back(message_item(item_id("msg", output.size()), content, true));
    for (const json& c : calls)
      output.push_back(call_item(item_id("fc", output.size()), c.value("id", ""), c["function"].value("name", ""),
                                 c["function"].value("arguments", ""), true));
    return response_object(output, &done);
  }

  std::string stream_begin() override {
    std::string out = event("response.created", {{"response", response_object(json::array(), nullptr)}});
    out += event("response.in_progress", {{"response", response_object(json::array(), nullptr)}});
    return out;
  }

  std::string stream_chunk(const json& chunk) override {
    std::string out;
    for (const json& c : chunk.value("choices", json::array())) {
      if (auto f = c.find("finish_reason"); f != c.end() && f->is_string()) finish_ = f->get<std::string>();
      const json delta = c.value("delta", json::object());
      if (auto r = delta.find("reasoning_content"); r != delta.end() && r->is_string() && !r->get<std::string>().empty())
        out += text_delta(ItemKind::Reasoning, r->get<std::string>());
      if (auto t = delta.find("content"); t != delta.end() && t->is_string() && !t->get<std::string>().empty())
        out += text_delta(ItemKind::Message, t->get<std::string>());
      for (const json& call : delta.value("tool_calls", json::array())) {
        const json fn = call.value("function", json::object());
        if (call.contains("id")) {
          out += close_item();
          open_ = ItemKind::Call;
          open_index_ = output_.size();
          open_id_ = item_id("fc", open_index_);
          call_id_ = call.value("id", "");
          call_name_ = fn.value("name", "");
          text_.clear();
          out += event("response.output_item.added",
                       {{"output_index", open_index_}, {"item", call_item(open_id_, call_id_, call_name_, "", false)}});
        }
        const std::string args = fn.value("arguments", "");
        if (open_ == ItemKind::Call && !args.empty()) {
          text_ += args;
          out += event("response.function_call_arguments.delta",
                       {{"item_id", open_id_}, {"output_index", open_index_}, {"delta", args}});
        }
      }
    }
    return out;
  }

  std::string stream_end(const sched::Event& done) override {
    std::string out = close_item();
    if (output_.empty()) {  // nothing was written: an empty message, as unstreamed
      out += open_item(ItemKind::Message);
      out += close_item();
    }
    const json resp = response_object(output_, &done);
    out += event(resp["status"] == "incomplete" ? "response.incomplete" : "response.completed", {{"response", resp}});
    return out;
  }

  std::string stream_error(const ApiError& e) override {
    return event("error", {{"code", e.code.empty() ? json(nullptr) : json(e.code)},
                           {"message", e.message},
                           {"param", e.param.empty() ? json(nullptr) : json(e.param)}});
  }

 private:
  std::string item_id(const char* prefix, size_t index) const {
    return std::string(prefix) + "_" + id_.substr(id_.find('_') + 1) + "_" + std::to_string(index);
  }

  static json reasoning_item(const std::string& id, const std::string& text) {
    json content = json::array();
    if (!text.empty()) content.push_back({{"type", "reasoning_text"}, {"text", text}});
    return {{"type", "reasoning"}, {"id", id}, {"summary", json::array()}, {"content", content}};
  }
  static json output_text(const std::string& text) {
    return {{"type", "output_text"}, {"text", text}, {"annotations", json::array()}, {"logprobs", json::array()}};
  }
  static json message_item(const std::string& id, const std::string& text, bool done) {
    return {{"type", "message"},
            {"id", id},
            {"status", done ? "completed" : "in_progress"},
            {"role", "assistant"},
            {"content", done ? json::array({output_text(text)}) : json::array()}};
  }
  static json call_item(const std::string& id, const std::string& call_id, const std::string& name,
                        const std::string& arguments, bool done) {
    return {{"type", "function_call"}, {"id", id},           {"call_id", call_id},
            {"name", name},            {"arguments", arguments}, {"status", done ? "completed" : "in_progress"}};
  }

  json echo(const char* key, json dflt) const {
    auto it = request_.find(key);
    return it == request_.end() || it->is_null() ? dflt : *it;
  }

  json response_object(const json& output, const sched::Event* done) const {
    const bool cut = done && finish_ == "length";
    json r = {{"id", id_},
              {"object", "response"},
              {"created_at", created_},
              {"status", done ? (cut ? "incomplete" : "completed") : "in_progress"},
              {"error", nullptr},
              {"incomplete_details", cut ? json{{"reason", "max_output_tokens"}} : json(nullptr)},
              {"instructions", echo("instructions", nullptr)},
              {"max_output_tokens", echo("max_output_tokens", nullptr)},
              {"model", model_},
              {"output", output},
              {"parallel_tool_calls", echo("parallel_tool_calls", true)},
              {"previous_response_id", nullptr},
              {"reasoning", echo("reasoning", json{{"effort", nullptr}, {"summary", nullptr}})},
              {"store", false},
              {"temperature", echo("temperature", 1.0)},
              {"text", echo("text", json{{"format", {{"type", "text"}}}})},
              {"tool_choice", echo("tool_choice", "auto")},
              {"tools", echo("tools", json::array())},
              {"top_p", echo("top_p", 1.0)},
              {"truncation", "disabled"},
              {"metadata", echo("metadata", json::object())},
              {"usage", nullptr}};
    if (done) {
      const sched::Usage& u = done->usage;
      int64_t reasoning_tokens = 0;
      if (!reasoning_text_.empty() && tokenizer_)
        reasoning_tokens = std::min<int64_t>(static_cast<int64_t>(tokenizer_->tokenize(reasoning_text_, false, false).size()),
                                             u.completion_tokens);
      r["usage"] = {{"input_tokens", u.prompt_tokens},
                    {"input_tokens_details", {{"cached_tokens", u.cached_tokens}}},
                    {"output_tokens", u.completion_tokens},
                    {"output_tokens_details", {{"reasoning_tokens", reasoning_tokens}}},
                    {"total_tokens", u.prompt_tokens + u.completion_tokens}};
    }
    return r;
  }

  std::string event(const char* type, json data) {
    data["type"] = type;
    data["sequence_number"] = seq_++;
    return sse_event(type, data);
  }

  // A piece of reasoning or message text: into the open item of its kind, else a new one.
  std::string text_delta(ItemKind kind, const std::string& delta) {
    std::string out;
    if (open_ != kind) {
      out += close_item();
      out += open_item(kind);
    }
    text_ += delta;
    if (kind == ItemKind::Reasoning) reasoning_text_ += delta;
    out += event(kind == ItemKind::Reasoning ? "response.reasoning_text.delta" : "response.output_text.delta",
                 kind == ItemKind::Reasoning
                     ? json{{"item_id", open_id_}, {"output_index", open_index_}, {"content_index", 0}, {"delta", delta}}
                     : json{{"item_id", open_id_},
                            {"output_index", open_index_},
                            {"content_index", 0},
                            {"delta", delta},
                            {"logprobs", json::array()}});
    return out;
  }

  std::string open_item(ItemKind kind) {
    open_ = kind;
    open_index_ = output_.size();
    open_id_ = item_id(kind == ItemKind::Reasoning ? "rs" : "msg", open_index_);
    text_.clear();
    const bool reasoning = kind == ItemKind::Reasoning;
    json item = reasoning ? reasoning_item(open_id_, "") : message_item(open_id_, "", false);
    std::string out = event("response.output_item.added", {{"output_index", open_index_}, {"item", item}});
    const json part = reasoning ? json{{"type", "reasoning_text"}, {"text", ""}} : output_text("");
    out += event("response.content_part.added",
                 {{"item_id", open_id_}, {"output_index", open_index_}, {"content_index", 0}, {"part", part}});
    return out;
  }

  std::string close_item() {
    std::string out;
    const json where = {{"item_id", open_id_}, {"output_index", open_index_}};
    json item;
    switch (open_) {
      case ItemKind::None: return out;
      case ItemKind::Reasoning:
      case ItemKind::Message: {
        const bool reasoning = open_ == ItemKind::Reasoning;
        json done = where;
        done["content_index"] = 0;
        done["text"] = text_;
        if (!reasoning) done["logprobs"] = json::array();
        out += event(reasoning ? "response.reasoning_text.done" : "response.output_text.done", done);
        const json part = reasoning ? json{{"type", "reasoning_text"}, {"text", text_}} : output_text(text_);
        json pd = where;
        pd["content_index"] = 0;
        pd["part"] = part;
        out += event("response.content_part.done", pd);
        item = reasoning ? reasoning_item(open_id_, text_) : message_item(open_id_, text_, true);
        break;
      }
      case ItemKind::Call: {
        json done = where;
        done["arguments"] = text_;
        done["name"] = call_name_;
        out += event("response.function_call_arguments.done", done);
        item = call_item(open_id_, call_id_, call_name_, text_, true);
        break;
      }
    }
    out += event("response.output_item.done", {{"output_index", open_index_}, {"item", item}});
    output_.push_back(std::move(item));
    open_ = ItemKind::None;
    text_.clear();
    return out;
  }

  const std::string id_;
  const std::string model_;
  const json request_;
  const Tokenizer* tokenizer_;
  const int64_t created_;
  int64_t seq_ = 0;
  std::string finish_ = "stop";  // the chat finish_reason
  std::string reasoning_text_;   // all reasoning (usage's reasoning_tokens)
  // Streamed: items closed so far, and the open one.
  json output_ = json::array();
  ItemKind open_ = ItemKind::None;
  size_t open_index_ = 0;
  std::string open_id_;
  std::string text_;  // the open item's text or arguments
  std::string call_id_, call_name_;
};

}  // namespace responses_out

std::shared_ptr<WireFormat> make_responses_wire(std::string id, std::string model, nlohmann::json request,
                                                const Tokenizer* tokenizer) {
  return std::make_shared<responses_out::ResponsesWire>(std::move(id), std::move(model), std::move(request), tokenizer);
}

}  // namespace ubatch::server
