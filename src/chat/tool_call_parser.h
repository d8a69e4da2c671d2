// Splitting a model's reply into text and tool calls, for every format of tool_format.h.
//
// scan_tool_calls works on a reply that may still be growing (streaming: final = false) or is
// complete (final = true). It finds the format's trigger, then reads the calls with the
// format's syntax: JSON values are delimited by a scanner that knows strings and nesting and
// parsed by nlohmann-json; the whitespace inside a format's markers is matched loosely (any
// run, or none); a closing marker missing at the very end of a final reply is accepted (a
// grammar ends there when the closer is a control token the model cannot spell as text).
// A call's arguments are the exact JSON text the model wrote (for XmlParams formats, the
// object built from the parameters: string-typed parameters as strings, others parsed as
// JSON), so a streamed reply and the same reply unstreamed carry identical arguments.
//
// Malformed calls (bad JSON, a function not among the tools, arguments that are not an
// object, text after the calls) make the whole reply text: parse_tool_calls returns it as
// content with no calls, never an error. A reply that ends inside its calls (max_tokens or a
// stop string cut it) keeps the calls completed before the cut; the cut one is dropped. A
// call equal to an earlier call of the same reply (same function, same arguments as JSON
// values) is dropped too: a repeated call is how a small model loops under a forced choice,
// and running it twice is never what the reply means.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "chat/tool_format.h"
#include "chat/tool_types.h"

namespace ubatch::chat {

// A call as far as the text shows it.
struct PartialCall {
  std::string name;
  bool name_done = false;  // the name is complete
  std::string arguments;   // the arguments text so far (JSON formats: raw bytes as written)
  bool args_done = false;  // the arguments are complete
};

struct CallScan {
  enum class State {
    NoCalls,     // no trigger in the text (so far): it is all content
    Incomplete,  // the calls have begun and the text ends inside them (final = false only)
    Done,        // the calls are complete (and only whitespace follows)
    Malformed,   // the text after the trigger is not a valid call list
  };
  State state = State::NoCalls;
  size_t calls_begin = std::string_view::npos;  // offset of the trigger (when found)
  size_t calls_end = std::string_view::npos;    // offset after the calls (when they were read)
  bool text_after = false;                      // Malformed only because text other than whitespace follows the calls
  bool cut = false;                             // final only (Malformed): the text ended inside the calls
  std::vector<PartialCall> calls;
};

// Scans `text` (the whole reply so far) for calls in format `f`. `tools` supplies the known
// names and, for XmlParams formats, the parameter types.
CallScan scan_tool_calls(const ToolFormat& f, std::string_view text, const std::vector<ToolDef>& tools, bool final);

// The calls of `scan` to return, as indices into scan.calls: those read completely (name and
// arguments, a known function) before the first that is not, less every call equal to an
// earlier one (name and arguments compared as JSON values). A scan that grows (streaming)
// only ever appends to this list.
std::vector<size_t> complete_calls(const CallScan& scan, const std::vector<ToolDef>& tools);

// The reply so far (final = false) holds a complete call equal to an earlier complete one. Under
// a forced choice with parallel calls that is how a small model loops (it writes the same call
// until the grammar's bound or max_tokens): the server ends the reply there, and the repeat is
// dropped from the answer (complete_calls), so the calls before it are the answer.
bool repeats_a_call(const ToolFormat& f, std::string_view text, const std::vector<ToolDef>& tools);

// The complete reply → content and calls (ids left empty for the caller to assign). Text
// before the trigger, without its trailing whitespace, is the content; with no valid calls
// the whole text is the content. A reply cut inside its calls gives the calls completed before
// the cut (complete_calls), or, when none was, the whole text as content.
ParsedReply parse_tool_calls(const ToolFormat& f, std::string_view text, const std::vector<ToolDef>& tools);

// A fresh call id: "call_" + 24 random letters and digits.
std::string new_tool_call_id();

}  // namespace ubatch::chat
