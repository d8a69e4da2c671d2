// Streaming a reply that may hold tool calls: text pieces in, OpenAI deltas out. Text before
// the calls streams as content as it comes; text that could be the start of the format's
// trigger (and trailing whitespace) is held back until the next piece decides it. Once the
// trigger is seen, each call is announced once with its index, id and name, and its
// arguments follow in pieces as the model writes them (JSON formats: the raw bytes; XmlParams
// formats: the whole object when the call closes).
//
// Calls are streamed as they are written only when a grammar constrains the reply
// (`constrained`: they cannot turn out malformed); otherwise they are held until the reply
// ends and sent whole (id and name, then the arguments) — or, when they are not valid calls,
// as content. So the concatenated deltas equal the unstreamed response (parse_tool_calls on
// the whole text) except in one case: a constrained reply cut inside a call by max_tokens or a
// stop string, whose partial call was already sent; its text is then also sent as content,
// as the unstreamed response has it.
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
  // The reply's calls parsed completely (after finish): finish_reason "tool_calls".
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
  struct Sent {
    std::string id;
    size_t arg_bytes = 0;
  };
  std::vector<Sent> sent_;  // calls announced so far
  bool calls_complete_ = false;
  bool constrained_ = true;
};

}  // namespace ubatch::chat
