// What the route handlers share: the configuration, the backend (engine + tokenizer, set
// once the model is loaded), the drain and stop flags, and the server's own counters for
// /metrics.
// Internal to src/server/.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "chat/chat_renderer.h"
#include "server/http/server.h"
#include "server/http_server.h"

namespace ubatch::server {

struct Backend {
  sched::Engine* engine = nullptr;
  const Tokenizer* tokenizer = nullptr;
  std::string chat_template;     // resolved: the model's template or a family name
  std::shared_ptr<const chat::ChatRenderer> chat;  // null: the template cannot render (chat answers 500)
  std::string chat_template_error;  // why chat is null
  int32_t n_ctx = 0;     // most tokens one request's sequence may hold (prompt + generated)
  int32_t kv_cells = 0;  // KV cache capacity, all sequences together
  int32_t n_vocab = 0;
};

struct HttpCounters {
  std::mutex mutex;
  std::map<int, uint64_t> responses_by_status;  // HTTP responses sent, by status
  std::atomic<uint64_t> disconnects{0};         // requests cancelled because the client went away
  std::atomic<int64_t> streams_active{0};       // SSE responses in progress
};

// Functions to call once when the server begins to drain (HttpServer::drain): responses that
// would never end by themselves (the dashboard's event streams) end on them, so that a
// draining server does not wait for them. Each is an Exchange::waker (never blocks, holds
// nothing strongly). Thread-safe.
class DrainListeners {
 public:
  uint64_t add(std::function<void()> fn) {
    std::lock_guard<std::mutex> lock(mutex_);
    listeners_.emplace(++next_, std::move(fn));
    return next_;
  }
  void remove(uint64_t id) {
    std::lock_guard<std::mutex> lock(mutex_);
    listeners_.erase(id);
  }
  void notify_all() {
    std::map<uint64_t, std::function<void()>> now;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      now = listeners_;
    }
    for (auto& [id, fn] : now) fn();
  }

 private:
  std::mutex mutex_;
  std::map<uint64_t, std::function<void()>> listeners_;
  uint64_t next_ = 0;
};

struct ServerState {
  explicit ServerState(ServerConfig c) : config(std::move(c)) {}
  const ServerConfig config;
  std::atomic<const Backend*> backend{nullptr};  // null while loading; set once
  std::unique_ptr<Backend> backend_owner;
  std::atomic<bool> draining{false};  // graceful shutdown began: /health 503, new completions 503
  std::atomic<bool> stopping{false};  // stop() began: requests still running are ended
  const http::TransportStats* transport = nullptr;  // connection counters (for /metrics)
  HttpCounters counters;
  DrainListeners on_drain;  // called by HttpServer::drain after `draining` is set
  std::string id_salt;  // random per process: response ids differ across restarts
};

}  // namespace ubatch::server
