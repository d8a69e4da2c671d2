#include "server/completion_response.h"

#include <optional>

#include "chat/tool_call_parser.h"
#include "tokenizer/tokenizer.h"

namespace ubatch::server {

using json = nlohmann::json;

namespace {

// A token's bytes as valid UTF-8 text (a partial character becomes U+FFFD).
std::string piece_text(const std::string& raw) {
  Utf8StreamDecoder d;
  std::string s = d.push(raw);
  s += d.flush();
  return s;
}

json bytes_json(const std::string& raw) {
  json b = json::array();
  for (unsigned char c : raw) b.push_back(static_cast<int>(c));
  return b;
}

int32_t chosen_id(const sched::Event& e) { return e.logprob.id >= 0 ? e.logprob.id : e.token; }

// Chat: {"token", "logprob", "bytes", "top_logprobs": [{"token", "logprob", "bytes"}]}.
json chat_logprob_entry(const Tokenizer& tok, const sched::Event& e) {
  const std::string raw = tok.token_to_piece(chosen_id(e));
  json top = json::array();
  for (const TokenLogprob& t : e.top) {
    const std::string r = tok.token_to_piece(t.id);
    top.push_back({{"token", piece_text(r)}, {"logprob", t.logprob}, {"bytes", bytes_json(r)}});
  }
  return {{"token", piece_text(raw)}, {"logprob", e.logprob.logprob}, {"bytes", bytes_json(raw)}, {"top_logprobs", top}};
}

json empty_legacy_logprobs() {
  return {{"tokens", json::array()}, {"token_logprobs", json::array()}, {"top_logprobs", json::array()},
          {"text_offset", json::array()}};
}

// Completions (legacy): appends one token to the parallel arrays.
void append_legacy_logprob(json& lp, const Tokenizer& tok, const sched::Event& e, int64_t offset) {
  lp["tokens"].push_back(piece_text(tok.token_to_piece(chosen_id(e))));
  lp["token_logprobs"].push_back(e.logprob.logprob);
  json top = json::object();
  for (const TokenLogprob& t : e.top) top[piece_text(tok.token_to_piece(t.id))] = t.logprob;
  lp["top_logprobs"].push_back(top);
  lp["text_offset"].push_back(offset);
}

}  // namespace

std::string tool_reply_text(const Tokenizer& tok, const sched::Event& e, bool special) {
  if (!special || !e.text.empty() || e.token < 0 || tok.is_eog(e.token)) return e.text;
  if (!tok.token_to_piece(e.token, false).empty()) return e.text;  // held back by the stop or UTF-8 buffer
  return tok.token_to_piece(e.token, true);
}

std::string harmony_reply_text(const Tokenizer& tok, const sched::Event& e) {
  std::string t = tool_reply_text(tok, e, true);
  return t == e.text || chat::is_harmony_marker(t) ? t : e.text;
}

namespace {

// One call of a reply, as OpenAI writes it.
json tool_call_json(const chat::ToolCall& c) {
  return {{"id", c.id}, {"type", "function"}, {"function", {{"name", c.name}, {"arguments", c.arguments}}}};
}

}  // namespace

const char* finish_reason_text(sched::FinishReason r) {
  switch (r) {
    case sched::FinishReason::Stop: return "stop";
    case sched::FinishReason::Length: return "length";
    case sched::FinishReason::Cancelled: return "cancelled";
    case sched::FinishReason::Error: return "error";
    case sched::FinishReason::Deadline: return "deadline";
  }
  return "error";
}

json usage_json(const sched::Usage& u) {
  return {{"prompt_tokens", u.prompt_tokens},
          {"completion_tokens", u.completion_tokens},
          {"total_tokens", u.prompt_tokens + u.completion_tokens},
          {"prompt_tokens_details", {{"cached_tokens", u.cached_tokens}}}};
}

json timings_json(const sched::Timings& t) {
  return {{"queue_ms", t.queue_ms}, {"ttft_ms", t.ttft_ms}, {"tpot_ms", t.tpot_ms}, {"total_ms", t.total_ms},
          {"preempted", t.preempted}, {"preempted_ms", t.preempted_ms}};
}

CompletionAccumulator::CompletionAccumulator(ResponseMeta meta, int32_t n, const Tokenizer& tokenizer)
    : meta_(std::move(meta)), tokenizer_(tokenizer), choices_(static_cast<size_t>(std::max(n, 1))) {
  for (Choice& c : choices_)
    c.logprobs = meta_.endpoint == Endpoint::ChatCompletions ? json::array() : empty_legacy_logprobs();
}

void CompletionAccumulator::add(const sched::Event& e) {
  if (e.index < 0 || static_cast<size_t>(e.index) >= choices_.size()) return;
  Choice& c = choices_[static_cast<size_t>(e.index)];
  if (e.kind == sched::Event::Kind::Token) {
    if (meta_.logprobs && e.token >= 0) {
      if (meta_.endpoint == Endpoint::ChatCompletions)
        c.logprobs.push_back(chat_logprob_entry(tokenizer_, e));
      else
        append_legacy_logprob(c.logprobs, tokenizer_, e, static_cast<int64_t>(c.text.size()));
    }
    c.text += e.text;
    if (meta_.tool_format) c.tool_text += tool_reply_text(tokenizer_, e, meta_.tool_special_text);
    if (meta_.harmony) c.tool_text += harmony_reply_text(tokenizer_, e);
  } else if (e.kind == sched::Event::Kind::Finish) {
    c.finish = e.finish;
    c.finished = true;
    c.error = e.error;
  }
}

json CompletionAccumulator::response(const sched::Event& done) const {
  const bool chat = meta_.endpoint == Endpoint::ChatCompletions;
  json choices = json::array();
  for (size_t i = 0; i < choices_.size(); ++i) {
    const Choice& c = choices_[i];
    json choice = {{"index", i}};
    const char* finish = finish_reason_text(c.finished ? c.finish : sched::FinishReason::Cancelled);
    // Reasoning: the block is taken off the reply (the tool text too, which differs only by
    // control tokens' text) and returned as reasoning_content.
    std::string text = c.text, tool_text = c.tool_text;
    std::optional<std::string> reasoning;
    if (chat && meta_.reasoning) {
      chat::ReasoningSplit split = chat::split_reasoning(meta_.tool_format ? c.tool_text : c.text, meta_.reasoning_open);
      if (split.has_reasoning) reasoning = std::move(split.reasoning);
      if (meta_.tool_format)
        tool_text = std::move(split.content);
      text = chat::split_reasoning(c.text, meta_.reasoning_open).content;
    }
    if (chat && meta_.harmony) {
      const chat::HarmonyReply reply = chat::parse_harmony(meta_.tool_prefill + c.tool_text, *meta_.tools);
      if (reply.has_reasoning) reasoning = reply.reasoning;
      choice["message"] = {{"role", "assistant"}, {"content", reply.content}};
      if (!reply.calls.empty()) {
        json calls = json::array();
        for (chat::ToolCall call : reply.calls) {
          call.id = chat::new_tool_call_id();
          calls.push_back(tool_call_json(call));
        }
        if (reply.content.empty()) choice["message"]["content"] = nullptr;
        choice["message"]["tool_calls"] = std::move(calls);
        if (c.finished && c.finish == sched::FinishReason::Stop) finish = "tool_calls";
      }
      choice["logprobs"] = meta_.logprobs ? json{{"content", c.logprobs}} : json(nullptr);
    } else if (chat && meta_.tool_format) {
      const chat::ParsedReply reply = chat::parse_tool_calls(*meta_.tool_format, meta_.tool_prefill + tool_text,
                                                             *meta_.tools);
      if (reply.calls.empty()) {
        choice["message"] = {{"role", "assistant"}, {"content", text}};
      } else {
        json calls = json::array();
        for (chat::ToolCall call : reply.calls) {
          call.id = chat::new_tool_call_id();
          calls.push_back(tool_call_json(call));
        }
        choice["message"] = {{"role", "assistant"},
                             {"content", reply.content.empty() ? json(nullptr) : json(reply.content)},
                             {"tool_calls", calls}};
        if (c.finished && c.finish == sched::FinishReason::Stop) finish = "tool_calls";
      }
      choice["logprobs"] = meta_.logprobs ? json{{"content", c.logprobs}} : json(nullptr);
    } else if (chat) {
      choice["message"] = {{"role", "assistant"}, {"content", text}};
      choice["logprobs"] = meta_.logprobs ? json{{"content", c.logprobs}} : json(nullptr);
    } else {
      choice["text"] = c.text;
      choice["logprobs"] = meta_.logprobs ? c.logprobs : json(nullptr);
    }
    if (reasoning) choice["message"]["reasoning_content"] = *reasoning;
    choice["finish_reason"] = finish;
    if (!c.error.empty() && c.finish == sched::FinishReason::Error) choice["error"] = c.error;
    choices.push_back(std::move(choice));
  }
  return {{"id", meta_.id},
          {"object", chat ? "chat.completion" : "text_completion"},
          {"created", meta_.created},
          {"model", meta_.model},
          {"choices", choices},
          {"usage", usage_json(done.usage)},
          {"timings", timings_json(done.timings)}};
}

ChunkBuilder::ChunkBuilder(ResponseMeta meta, int32_t n, const Tokenizer& tokenizer, bool include_usage)
    : meta_(std::move(meta)),
      tokenizer_(tokenizer),
      include_usage_(include_usage),
      text_offset_(static_cast<size_t>(std::max(n, 1)), 0) {
  if (meta_.tool_format && meta_.endpoint == Endpoint::ChatCompletions)
    for (size_t i = 0; i < text_offset_.size(); ++i)
      tool_streams_.push_back(
          std::make_unique<chat::ToolCallStream>(*meta_.tool_format, *meta_.tools, meta_.tool_prefill,
                                                 /*constrained=*/!meta_.tool_special_text));
  if (meta_.reasoning && meta_.endpoint == Endpoint::ChatCompletions)
    for (size_t i = 0; i < text_offset_.size(); ++i)
      reasoning_streams_.push_back(std::make_unique<chat::ReasoningStream>(meta_.reasoning_open));
  if (meta_.harmony && meta_.endpoint == Endpoint::ChatCompletions)
    for (size_t i = 0; i < text_offset_.size(); ++i) {
      harmony_streams_.push_back(std::make_unique<chat::HarmonyStream>(*meta_.tools));
      harmony_streams_.back()->push(meta_.tool_prefill);  // a header: nothing to send
    }
}

namespace {

// A harmony piece as a chat delta: reasoning_content, content, whole calls (index from `first`).
json harmony_delta(const chat::HarmonyStream::Piece& p, size_t first) {
  json delta = json::object();
  if (!p.reasoning.empty()) delta["reasoning_content"] = p.reasoning;
  if (!p.content.empty()) delta["content"] = p.content;
  if (!p.calls.empty()) {
    json calls = json::array();
    for (size_t k = 0; k < p.calls.size(); ++k)
      calls.push_back({{"index", first + k},
                       {"id", chat::new_tool_call_id()},
                       {"type", "function"},
                       {"function", {{"name", p.calls[k].name}, {"arguments", p.calls[k].arguments}}}});
    delta["tool_calls"] = std::move(calls);
  }
  return delta;
}

}  // namespace

bool ChunkBuilder::harmony_token(const sched::Event& e, bool want_logprobs, json& out) {
  chat::HarmonyStream& stream = *harmony_streams_[static_cast<size_t>(e.index)];
  const size_t first = stream.n_calls_sent();
  const chat::HarmonyStream::Piece p = stream.push(harmony_reply_text(tokenizer_, e));
  if (p.empty() && !want_logprobs) return false;
  json choice = {{"index", e.index}, {"delta", harmony_delta(p, first)}};
  choice["logprobs"] = want_logprobs ? json{{"content", json::array({chat_logprob_entry(tokenizer_, e)})}}
                                     : json(nullptr);
  choice["finish_reason"] = nullptr;
  out = chunk(json::array({std::move(choice)}));
  return true;
}

json ChunkBuilder::delta_json(const chat::ToolStreamDelta& d) const {
  json delta = json::object();
  if (!d.content.empty()) delta["content"] = d.content;
  if (!d.calls.empty()) {
    json calls = json::array();
    for (const chat::ToolCallDelta& c : d.calls) {
      json one = {{"index", c.index}};
      json fn = json::object();
      if (!c.id.empty()) {
        one["id"] = c.id;
        one["type"] = "function";
        fn["name"] = c.name;
      }
      fn["arguments"] = c.arguments;
      one["function"] = std::move(fn);
      calls.push_back(std::move(one));
    }
    delta["tool_calls"] = std::move(calls);
  }
  return delta;
}

bool ChunkBuilder::flush(const sched::Event& e, json& out) {
  if (e.index < 0 || static_cast<size_t>(e.index) >= text_offset_.size()) return false;
  const size_t i = static_cast<size_t>(e.index);
  json delta = json::object();
  if (!harmony_streams_.empty()) {
    const size_t first = harmony_streams_[i]->n_calls_sent();
    delta = harmony_delta(harmony_streams_[i]->finish(), first);
    if (delta.empty()) return false;
    out = chunk(json::array({{{"index", e.index}, {"delta", delta}, {"logprobs", nullptr}, {"finish_reason", nullptr}}}));
    return true;
  }
  std::string content;  // what the reasoning stream still held for the content
  if (!reasoning_streams_.empty()) {
    chat::ReasoningStream::Piece p = reasoning_streams_[i]->finish();
    if (!p.reasoning.empty()) delta["reasoning_content"] = std::move(p.reasoning);
    content = std::move(p.content);
  }
  if (!tool_streams_.empty()) {
    chat::ToolStreamDelta d = tool_streams_[i]->push(content);
    chat::ToolStreamDelta tail = tool_streams_[i]->finish();
    d.content += tail.content;
    d.calls.insert(d.calls.end(), tail.calls.begin(), tail.calls.end());
    delta.update(delta_json(d));
  } else if (!content.empty()) {
    delta["content"] = std::move(content);
  }
  if (delta.empty()) return false;
  out = chunk(json::array({{{"index", e.index}, {"delta", delta}, {"logprobs", nullptr}, {"finish_reason", nullptr}}}));
  return true;
}

json ChunkBuilder::chunk(json choices) const {
  const bool chat = meta_.endpoint == Endpoint::ChatCompletions;
  json c = {{"id", meta_.id},
            {"object", chat ? "chat.completion.chunk" : "text_completion"},
            {"created", meta_.created},
            {"model", meta_.model},
            {"choices", std::move(choices)}};
  if (include_usage_) c["usage"] = nullptr;  // only the last chunk carries usage
  return c;
}

json ChunkBuilder::role(int32_t index) const {
  return chunk(json::array({{{"index", index},
                             {"delta", {{"role", "assistant"}, {"content", ""}}},
                             {"logprobs", nullptr},
                             {"finish_reason", nullptr}}}));
}

bool ChunkBuilder::token(const sched::Event& e, json& out) {
  const bool want_logprobs = meta_.logprobs && e.token >= 0;
  if (e.text.empty() && !want_logprobs &&
      ((tool_streams_.empty() && reasoning_streams_.empty() && harmony_streams_.empty()) || e.token < 0))
    return false;
  if (e.index < 0 || static_cast<size_t>(e.index) >= text_offset_.size()) return false;
  if (!harmony_streams_.empty()) return harmony_token(e, want_logprobs, out);
  int64_t& offset = text_offset_[static_cast<size_t>(e.index)];
  json choice = {{"index", e.index}};
  if (!reasoning_streams_.empty()) {
    const size_t i = static_cast<size_t>(e.index);
    chat::ReasoningStream::Piece p =
        reasoning_streams_[i]->push(tool_streams_.empty() ? e.text : tool_reply_text(tokenizer_, e, meta_.tool_special_text));
    json delta = json::object();
    if (!p.reasoning.empty()) delta["reasoning_content"] = std::move(p.reasoning);
    if (!tool_streams_.empty())
      delta.update(delta_json(tool_streams_[i]->push(p.content)));
    else if (!p.content.empty())
      delta["content"] = std::move(p.content);
    if (delta.empty() && !want_logprobs) return false;
    choice["delta"] = std::move(delta);
    choice["logprobs"] = want_logprobs ? json{{"content", json::array({chat_logprob_entry(tokenizer_, e)})}}
                                       : json(nullptr);
  } else if (!tool_streams_.empty()) {
    chat::ToolCallStream& stream = *tool_streams_[static_cast<size_t>(e.index)];
    const chat::ToolStreamDelta d = stream.push(tool_reply_text(tokenizer_, e, meta_.tool_special_text));
    if (d.empty() && !want_logprobs) return false;
    choice["delta"] = delta_json(d);
    choice["logprobs"] = want_logprobs ? json{{"content", json::array({chat_logprob_entry(tokenizer_, e)})}}
                                       : json(nullptr);
  } else if (meta_.endpoint == Endpoint::ChatCompletions) {
    choice["delta"] = {{"content", e.text}};
    choice["logprobs"] = want_logprobs ? json{{"content", json::array({chat_logprob_entry(tokenizer_, e)})}}
                                       : json(nullptr);
  } else {
    choice["text"] = e.text;
    if (want_logprobs) {
      json lp = empty_legacy_logprobs();
      append_legacy_logprob(lp, tokenizer_, e, offset);
      choice["logprobs"] = std::move(lp);
    } else {
      choice["logprobs"] = nullptr;
    }
  }
  choice["finish_reason"] = nullptr;
  offset += static_cast<int64_t>(e.text.size());
  out = chunk(json::array({std::move(choice)}));
  return true;
}

json ChunkBuilder::finish(const sched::Event& e) const {
  json choice = {{"index", e.index}};
  if (meta_.endpoint == Endpoint::ChatCompletions)
    choice["delta"] = json::object();
  else
    choice["text"] = "";
  choice["logprobs"] = nullptr;
  const bool calls = (!tool_streams_.empty() && e.index >= 0 && static_cast<size_t>(e.index) < tool_streams_.size() &&
                      tool_streams_[static_cast<size_t>(e.index)]->has_calls()) ||
                     (!harmony_streams_.empty() && e.index >= 0 &&
                      static_cast<size_t>(e.index) < harmony_streams_.size() &&
                      harmony_streams_[static_cast<size_t>(e.index)]->has_calls());
  choice["finish_reason"] = calls && e.finish == sched::FinishReason::Stop ? "tool_calls" : finish_reason_text(e.finish);
  if (!e.error.empty() && e.finish == sched::FinishReason::Error) choice["error"] = e.error;
  return chunk(json::array({std::move(choice)}));
}

json ChunkBuilder::usage(const sched::Event& done) const {
  json c = chunk(json::array());
  c["usage"] = usage_json(done.usage);
  c["timings"] = timings_json(done.timings);
  return c;
}

}  // namespace ubatch::server
