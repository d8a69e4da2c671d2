#include "server/sse.h"

#include "server/errors.h"

namespace ubatch::server {

std::string sse_frame(const nlohmann::json& chunk) {
  std::string out = "data: ";
  out += dump_json(chunk);  // compact: JSON escapes every newline inside strings
  out += "\n\n";
  return out;
}

std::string sse_event(std::string_view name, const nlohmann::json& data) {
  std::string out = "event: ";
  out += name;
  out += '\n';
  out += sse_frame(data);
  return out;
}

SseStream::SseStream(std::shared_ptr<http::Exchange> ex, http::Response head, std::chrono::milliseconds keepalive)
    : ex_(std::move(ex)), head_(std::move(head)), keepalive_(keepalive), last_write_(std::chrono::steady_clock::now()) {
  head_.body.clear();
}

void SseStream::arm() {
  last_write_ = std::chrono::steady_clock::now();
  if (keepalive_.count() > 0) schedule(keepalive_);
}

void SseStream::schedule(std::chrono::steady_clock::duration delay) {
  // One timer per stream, re-armed from its own tick: a token written meanwhile only moves
  // last_write_, so a busy stream costs one timer event per interval, not one per token.
  ex_->after(std::chrono::ceil<std::chrono::milliseconds>(delay), [weak = weak_from_this()] {
    if (auto self = weak.lock()) self->tick();
  });
}

void SseStream::tick() {
  if (ended_ || !ex_->active()) return;
  const auto now = std::chrono::steady_clock::now();
  const auto silent = now - last_write_;
  if (silent < keepalive_) return schedule(keepalive_ - silent);
  if (!write(kSseKeepAlive)) return;
  ++keepalives_;
  schedule(keepalive_);
}

void SseStream::start() {
  if (started_) return;
  started_ = true;
  ex_->start_stream(head_);
}

bool SseStream::write(std::string_view bytes) {
  if (ended_) return false;
  start();
  last_write_ = std::chrono::steady_clock::now();
  return ex_->write(bytes);
}

void SseStream::end() {
  if (ended_) return;
  start();
  ended_ = true;
  ex_->end_stream();
}

}  // namespace ubatch::server
