// Server-Sent Events framing as the OpenAI streaming API uses it (WHATWG HTML, "Server-sent
// events"): one `data: <json>\n\n` frame per chunk, then `data: [DONE]\n\n`. The JSON is
// written on one line, so a frame never holds a bare newline that would split it.
#pragma once

#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace ubatch::server {

inline constexpr std::string_view kSseContentType = "text/event-stream";
inline constexpr std::string_view kSseDone = "data: [DONE]\n\n";

// "data: " + compact JSON (invalid UTF-8 replaced by U+FFFD) + "\n\n".
std::string sse_frame(const nlohmann::json& chunk);

}  // namespace ubatch::server
