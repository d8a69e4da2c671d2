// libFuzzer target: reading tool calls out of model output (src/chat/tool_call_parser.h and
// tool_call_stream.h) — what the server does with text it does not control. Build and run:
// docs/FUZZING.md.
//
// Input: byte 0 selects the format (modulo the number of formats), byte 1 how the reply is cut
// into stream pieces (a seed for piece lengths 1..16); the rest is the reply.
// Checks, for every input and format:
//  - parsing never crashes; a reply with calls names only known tools and every call's
//    arguments parse as a JSON object;
//  - the content is a prefix of the reply (text before the calls) or the whole reply;
//  - unconstrained streaming (calls held until the end) gives exactly the unstreamed result:
//    the same content, the same calls with the same names and arguments;
//  - read as gpt-oss harmony channels (chat/harmony.h), calls name known tools with object
//    arguments, and the stream in the same pieces gives the whole reading.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "chat/harmony.h"
#include "chat/tool_call_parser.h"
#include "chat/tool_call_stream.h"
#include "chat/tool_format.h"

namespace {

#define FUZZ_CHECK(cond)                                                                  \
  do {                                                                                    \
    if (!(cond)) {                                                                        \
      std::fprintf(stderr, "fuzz check failed: %s (%s:%d)\n", #cond, __FILE__, __LINE__); \
      __builtin_trap();                                                                   \
    }                                                                                     \
  } while (0)

std::vector<ubatch::chat::ToolDef> tools() {
  std::vector<ubatch::chat::ToolDef> t(2);
  t[0].name = "get_weather";
  t[0].parameters = nlohmann::ordered_json::parse(R"({"type": "object", "properties": {"city": {"type": "string"}}})");
  t[1].name = "f";
  t[1].parameters = nlohmann::ordered_json::parse(R"({"type": "object", "properties": {"n": {"type": "integer"}}})");
  return t;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace ubatch::chat;
  if (size < 2) return 0;
  static const std::vector<ToolDef> kTools = tools();
  const std::vector<ToolFormat>& formats = tool_formats();
  const ToolFormat& f = formats[data[0] % formats.size()];
  uint32_t seed = data[1];
  const std::string_view text(reinterpret_cast<const char*>(data + 2), size - 2);

  const ParsedReply whole = parse_tool_calls(f, text, kTools);
  if (whole.calls.empty()) {
    FUZZ_CHECK(whole.content == text);
  } else {
    FUZZ_CHECK(text.substr(0, whole.content.size()) == whole.content);
    for (const ToolCall& c : whole.calls) {
      FUZZ_CHECK(c.name == "get_weather" || c.name == "f");
      const auto args = nlohmann::json::parse(c.arguments, nullptr, false);
      FUZZ_CHECK(!args.is_discarded() && args.is_object());
    }
  }

  ToolCallStream stream(f, kTools, "", /*constrained=*/false);
  std::string content;
  std::vector<ToolCall> calls;
  auto take = [&](const ToolStreamDelta& d) {
    content += d.content;
    for (const ToolCallDelta& cd : d.calls) {
      if (!cd.id.empty()) {
        FUZZ_CHECK(cd.index == static_cast<int>(calls.size()));
        calls.push_back(ToolCall{cd.id, cd.name, ""});
      }
      FUZZ_CHECK(cd.index >= 0 && cd.index < static_cast<int>(calls.size()));
      calls[static_cast<size_t>(cd.index)].arguments += cd.arguments;
    }
  };
  for (size_t p = 0; p < text.size();) {
    seed = seed * 1103515245u + 12345u;
    const size_t n = 1 + (seed >> 16) % 16;
    take(stream.push(text.substr(p, n)));
    p += n;
  }
  take(stream.finish());
  FUZZ_CHECK(content == whole.content);
  FUZZ_CHECK(calls.size() == whole.calls.size());
  for (size_t k = 0; k < calls.size(); ++k) {
    FUZZ_CHECK(calls[k].name == whole.calls[k].name);
    FUZZ_CHECK(calls[k].arguments == whole.calls[k].arguments);
  }
  FUZZ_CHECK(stream.has_calls() == !whole.calls.empty());
  (void)repeats_a_call(f, text, kTools);

  // The same reply read as harmony channels (chat/harmony.h), whole and in the same pieces.
  const HarmonyReply h = parse_harmony(text, kTools);
  for (const ToolCall& c : h.calls) {
    FUZZ_CHECK(c.name == "get_weather" || c.name == "f");
    const auto args = nlohmann::json::parse(c.arguments, nullptr, false);
    FUZZ_CHECK(!args.is_discarded() && args.is_object());
  }
  HarmonyStream hs(kTools);
  HarmonyReply hr;
  auto take_h = [&](const HarmonyStream::Piece& piece) {
    hr.reasoning += piece.reasoning;
    hr.content += piece.content;
    hr.calls.insert(hr.calls.end(), piece.calls.begin(), piece.calls.end());
  };
  seed = data[1];
  for (size_t p = 0; p < text.size();) {
    seed = seed * 1103515245u + 12345u;
    const size_t n = 1 + (seed >> 16) % 16;
    take_h(hs.push(text.substr(p, n)));
    p += n;
  }
  take_h(hs.finish());
  FUZZ_CHECK(hr.reasoning == h.reasoning && hr.content == h.content && hr.calls.size() == h.calls.size());
  for (size_t k = 0; k < h.calls.size(); ++k)
    FUZZ_CHECK(hr.calls[k].name == h.calls[k].name && hr.calls[k].arguments == h.calls[k].arguments);
  return 0;
}
