// Streaming a reply that may hold tool calls: text pieces in, OpenAI deltas out. Text before
// the calls streams as content as it comes; text that could be the start of the format's
// trigger (and trailing whitespace) is held back until the next piece decides it. Once the
// trigger is seen, each call is sent once it is complete — its index, id, name and whole
// arguments in one delta — so a client never holds a call that turns out cut or malformed.
//
// The calls sent are those parse_tool_calls returns for the whole reply (complete_calls: a
// call equal to an earlier one is left out; a reply cut inside its calls by max_tokens or a
// stop string keeps the calls completed before the cut), so the concatenated deltas equal the
// unstreamed response. When a grammar constrains the reply (`constrained`) each call goes out
// as soon as it is complete; otherwise calls are held until the reply ends and sent only when
// they are valid, else the text goes out as content.
//
// One object per choice; not thread-safe.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "chat/tool_call_parser.h"
#include "chat/tool_format.h"
#include "chat/tool_types.h"

namespace ubatch::chat {

struct ToolCallDelta {
  int index = 0;          // the call's position in the reply
  std::string id;         // first delta of a call only
  std::string name;       // first delta of a call only
  std::string arguments;  // a piece of the arguments text (may be "")
};

struct ToolStreamDelta {
  std::string content;               // a piece of content ("" none)
  std::vector<ToolCallDelta> calls;  // call pieces, in order
  bool empty() const { return content.empty() && calls.empty(); }
};

class ToolCallStream {
 public:
  // prefill: markup the prompt ended with (ToolGrammar::prefill), read as the reply's start.
  ToolCallStream(const ToolFormat& format, const std::vector<ToolDef>& tools, std::string prefill = "",
                 bool constrained = true);

  // The next piece of the reply.
  ToolStreamDelta push(std::string_view text);
  // The reply has ended: whatever was held back.
  ToolStreamDelta finish();
  // The reply returned calls (after finish): finish_reason "tool_calls" unless it was cut.
  bool has_calls() const { return calls_complete_; }

 private:
  ToolStreamDelta process(bool final);
  void emit_content(ToolStreamDelta& d, size_t upto);

  const ToolFormat& format_;
  const std::vector<ToolDef>& tools_;
  std::string all_;  // prefill + the reply so far
  size_t prefill_len_ = 0;
  size_t content_from_ = 0;  // all_[content_from_, …) not yet sent as content
  enum class Mode { Text, Calls, PlainOnly } mode_ = Mode::Text;
  size_t calls_begin_ = 0;
  size_t held_from_ = 0;  // the whitespace before the calls starts here (sent if they turn out malformed)
  size_t sent_ = 0;  // calls sent so far (a prefix of complete_calls)
  bool calls_complete_ = false;
  bool constrained_ = true;
};

}  // namespace ubatch::chat
