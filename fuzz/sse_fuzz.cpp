// libFuzzer target: the streaming path's text handling — Utf8StreamDecoder
// (src/tokenizer/utf8_stream_decoder.cpp) fed in arbitrary chunks, and the SSE frame builder
// (src/server/sse.cpp) on what it emits and on raw bytes. Build and run: docs/FUZZING.md.
//
// Input: byte 0 seeds the chunk sizes; the rest is the byte stream (as token pieces would
// deliver it). Checks, for every input:
//  - everything the decoder emits is valid UTF-8, whatever the chunking, and the same as
//    decoding the stream in one push (chunking never changes the text);
//  - valid UTF-8 input comes out unchanged; nothing is held back after flush();
//  - sse_frame() of a chunk holding the text (or the raw bytes, invalid UTF-8 included) is
//    one `data: <json>\n\n` frame: no other line break inside, JSON that parses, whose
//    text equals the decoded text (raw bytes: their U+FFFD-replaced form).
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "server/json_request.h"
#include "server/sse.h"
#include "tokenizer/tokenizer.h"

namespace {

using ubatch::Utf8StreamDecoder;

#define FUZZ_CHECK(cond)                                                           \
  do {                                                                             \
    if (!(cond)) {                                                                 \
      std::fprintf(stderr, "fuzz check failed: %s (%s:%d)\n", #cond, __FILE__, __LINE__); \
      __builtin_trap();                                                            \
    }                                                                              \
  } while (0)

std::string decode_whole(std::string_view bytes) {
  Utf8StreamDecoder d;
  return d.push(bytes) + d.flush();
}

// The frame's JSON text field, after checking the framing.
std::string frame_text(const std::string& frame) {
  FUZZ_CHECK(frame.size() >= 8 && frame.compare(0, 6, "data: ") == 0);
  FUZZ_CHECK(frame.compare(frame.size() - 2, 2, "\n\n") == 0);
  const std::string_view payload = std::string_view(frame).substr(6, frame.size() - 8);
  FUZZ_CHECK(payload.find('\n') == std::string_view::npos && payload.find('\r') == std::string_view::npos);
  FUZZ_CHECK(ubatch::server::is_valid_utf8(payload));
  const nlohmann::json j = nlohmann::json::parse(payload, nullptr, false);
  FUZZ_CHECK(!j.is_discarded());
  return j.at("choices").at(0).at("text").get<std::string>();
}

nlohmann::json chunk(const std::string& text) {
  return {{"id", "cmpl-fuzz"}, {"object", "text_completion"},
          {"choices", nlohmann::json::array({{{"index", 0}, {"text", text}, {"finish_reason", nullptr}}})}};
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  uint32_t state = data[0] * 2654435761u + 1;
  const std::string_view bytes(reinterpret_cast<const char*>(data + 1), size - 1);

  const std::string whole = decode_whole(bytes);
  FUZZ_CHECK(ubatch::server::is_valid_utf8(whole));
  if (ubatch::server::is_valid_utf8(bytes)) FUZZ_CHECK(whole == bytes);

  Utf8StreamDecoder d;
  std::string streamed;
  size_t pos = 0;
  while (pos < bytes.size()) {
    state = state * 1664525u + 1013904223u;
    const size_t len = (state >> 24) % 6;  // 0..5 bytes: empty pushes and split characters
    const std::string out = d.push(bytes.substr(pos, len));
    FUZZ_CHECK(ubatch::server::is_valid_utf8(out));
    // Each emitted piece is a frame of its own in a stream.
    FUZZ_CHECK(frame_text(ubatch::server::sse_frame(chunk(out))) == out);
    streamed += out;
    pos += len;
  }
  const std::string tail = d.flush();
  FUZZ_CHECK(ubatch::server::is_valid_utf8(tail));
  streamed += tail;
  FUZZ_CHECK(streamed == whole);
  FUZZ_CHECK(d.flush().empty());

  // Raw (possibly invalid) bytes in a frame: replaced, never a broken frame.
  const std::string raw(bytes);
  const std::string text = frame_text(ubatch::server::sse_frame(chunk(raw)));
  FUZZ_CHECK(ubatch::server::is_valid_utf8(text));
  if (ubatch::server::is_valid_utf8(raw)) FUZZ_CHECK(text == raw);
  return 0;
}
