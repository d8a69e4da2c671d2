// Server-Sent Events as the OpenAI streaming API uses them (WHATWG HTML, "Server-sent
// events"): one `data: <json>\n\n` frame per chunk, then `data: [DONE]\n\n`. The JSON is
// written on one line, so a frame never holds a bare newline that would split it. And the
// response that carries them (SseStream), which keeps a silent stream alive through proxies.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "server/http/exchange.h"

namespace ubatch::server {

inline constexpr std::string_view kSseContentType = "text/event-stream";
inline constexpr std::string_view kSseDone = "data: [DONE]\n\n";
// A comment line (ignored by every SSE reader: the standard's "lines starting with ':'"),
// sent while a stream has nothing else to say.
inline constexpr std::string_view kSseKeepAlive = ": keep-alive\n\n";

// "data: " + compact JSON (invalid UTF-8 replaced by U+FFFD) + "\n\n".
std::string sse_frame(const nlohmann::json& chunk);
// A named event, as the Responses and Anthropic Messages APIs stream them:
// "event: <name>\n" + sse_frame(data). `name` must hold no line break.
std::string sse_event(std::string_view name, const nlohmann::json& data);

// One event-stream response on an exchange, started lazily: its head (status 200 and header
// fields) goes out with the first frame — so that until then the request may still be
// answered with an HTTP error instead — or, at the latest, once the stream has been silent
// for `keepalive`.
//
// Keep-alive: a proxy in front of the server (nginx `proxy_read_timeout`, HAProxy `timeout
// server`, cloud load balancers) cuts a response that sends nothing for its idle timeout,
// typically with a 504. A stream waits with nothing to send while it is queued behind other
// requests, while a long prompt is prefilled, and while a running sequence is preempted. So
// whenever `keepalive` passes with nothing written, the head is sent if it was not yet, and
// then the comment `: keep-alive` (kSseKeepAlive); readers ignore it. `keepalive` 0: off.
//
// Threads: like the exchange (exchange.h), every method on the exchange's strand. Held by
// shared_ptr: the keep-alive timer (Exchange::after) holds it only weakly, and is dropped by
// the exchange once it is answered or aborted.
class SseStream : public std::enable_shared_from_this<SseStream> {
 public:
  // `head`: status and fields of the response (Content-Type, Cache-Control, …); its body is
  // ignored. Call arm() once the stream is owned by a shared_ptr.
  SseStream(std::shared_ptr<http::Exchange> ex, http::Response head, std::chrono::milliseconds keepalive);

  // Starts the keep-alive clock (nothing when keepalive is 0).
  void arm();
  // True once the head is sent: from then on the request can only end as a stream (an error
  // is an event, then `[DONE]`), never with another status.
  bool started() const { return started_; }
  // Sends the head now unless it was sent.
  void start();
  // Queues frame bytes (starting the stream first). False when they were not queued: the
  // client is gone or reads too slowly (Exchange::write); the exchange is then aborted.
  bool write(std::string_view bytes);
  // Ends the stream (starting it first, so that an empty stream is still a valid response).
  void end();
  // Keep-alive comments sent so far.
  int keepalives() const { return keepalives_; }

 private:
  void tick();
  void schedule(std::chrono::steady_clock::duration delay);

  std::shared_ptr<http::Exchange> ex_;
  http::Response head_;
  const std::chrono::milliseconds keepalive_;
  std::chrono::steady_clock::time_point last_write_;
  bool started_ = false;
  bool ended_ = false;
  int keepalives_ = 0;
};

}  // namespace ubatch::server
