// gpt-oss's chat format ("harmony"): a reply is a run of messages, each a header and a body,
//
//   <|channel|>analysis<|message|>…<|end|><|start|>assistant<|channel|>final<|message|>…<|return|>
//   <|channel|>commentary to=functions.NAME <|constrain|>json<|message|>{…}<|call|>
//
// (the generation prompt already wrote the first "<|start|>assistant"). The analysis channel
// is the model's reasoning (reasoning_content), the final channel and commentary without a
// recipient its answer (content), a message addressed to "functions.NAME" a tool call with
// the body as its arguments (docs/API.md, "Reasoning").
//
// The parser works on the reply's text with control tokens written out (the server passes
// each control token's own text, tool_reply_text), so a marker is the same whether the model
// wrote it as one control token or as plain text, and a stream may be split anywhere.
// `<|return|>` and `<|call|>` end generation, so a reply usually ends without them: the text
// after the last header is that message's body.
//
// The reading is total — any text has one: text before the first header, or after a message
// ends and before the next "<|start|>", is content; a header never completed is dropped;
// a marker inside a body that cannot be there (<|message|>, <|constrain|>) is dropped;
// "<|channel|>" inside a body starts a new message. A call whose function is not among the
// tools or whose body is not a JSON object is returned as content (its body), never as a call.
// Several bodies of one kind are joined with "\n".
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "chat/tool_types.h"

namespace ubatch::chat {

inline constexpr std::string_view kHarmonyAnalysisOpen = "<|channel|>analysis<|message|>";
inline constexpr std::string_view kHarmonyEnd = "<|end|>";
// What closes the analysis and opens the answer (the thinking budget's forced close).
inline constexpr std::string_view kHarmonyFinalOpen = "<|end|><|start|>assistant<|channel|>final<|message|>";

// `text` is one of harmony's markers (<|start|>, <|end|>, <|message|>, <|channel|>,
// <|constrain|>, <|return|>, <|call|>).
bool is_harmony_marker(std::string_view text);

// The template writes harmony's markers (gpt-oss): <|channel|>, <|message|> and <|start|>.
bool template_is_harmony(std::string_view source);

// Where the reply starts: the text after the prompt's last "<|start|>assistant" when it is a
// header left open for the model (e.g. "<|channel|>final<|message|>" from a template that skips
// the analysis) — no text after a "<|message|>" and no marker that ends a message — else ""
// (the usual generation prompt ends with "<|start|>assistant" itself). The reply is read as
// this text followed by what the model writes.
std::string harmony_reply_start(std::string_view prompt);

struct HarmonyReply {
  std::string reasoning;
  std::string content;
  std::vector<ToolCall> calls;  // ids left empty
  bool has_reasoning = false;   // an analysis message was opened (its text may be empty)
};

// A whole reply. `tools`: the functions a call may name (empty: no call is read; such
// messages are content).
HarmonyReply parse_harmony(std::string_view reply, const std::vector<ToolDef>& tools);

// The same, piece by piece: what push and finish return adds up to parse_harmony's result
// (text that may still be part of a marker is held back; a call goes out whole once its
// message ends, or at finish). One object per choice; not thread-safe.
class HarmonyStream {
 public:
  explicit HarmonyStream(const std::vector<ToolDef>& tools) : tools_(tools) {}
  struct Piece {
    std::string reasoning;
    std::string content;
    std::vector<ToolCall> calls;
    bool empty() const { return reasoning.empty() && content.empty() && calls.empty(); }
  };
  Piece push(std::string_view text);
  Piece finish();
  bool has_calls() const { return sent_calls_ > 0; }
  size_t n_calls_sent() const { return sent_calls_; }

 private:
  Piece process(bool final);
  const std::vector<ToolDef>& tools_;
  std::string all_;
  size_t sent_reasoning_ = 0, sent_content_ = 0, sent_calls_ = 0;
};

}  // namespace ubatch::chat
