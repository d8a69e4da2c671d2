// What the route handlers share: the configuration, the models (model_registry.h: which exist,
// which are loaded, each one's engine and tokenizer), the drain and stop flags, and the
// server's own counters for /metrics.
// Internal to src/server/.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "server/http/server.h"
#include "server/http_server.h"
#include "server/model_registry.h"
#include "server/request_workers.h"

namespace ubatch::server {

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
  explicit ServerState(ServerConfig c)
      : config(std::move(c)),
        models(std::make_unique<ModelRegistry>(config.model_name, config.chat_template)),
        workers(std::make_unique<RequestWorkers>(config.request_threads)) {}
  const ServerConfig config;
  // One model attached by HttpServer::set_backend, or several (HttpServer::serve_models);
  // replaced only before start().
  std::unique_ptr<ModelRegistry> models;
  // Where request parsing and checking runs, off the I/O threads (request_workers.h). After
  // `models`: its threads end before the models go.
  std::unique_ptr<RequestWorkers> workers;
  std::atomic<bool> draining{false};  // graceful shutdown began: /health 503, new completions 503
  std::atomic<bool> stopping{false};  // stop() began: requests still running are ended
  const http::TransportStats* transport = nullptr;  // connection counters (for /metrics)
  HttpCounters counters;
  DrainListeners on_drain;  // called by HttpServer::drain after `draining` is set
  std::string id_salt;  // random per process: response ids differ across restarts
  std::atomic<uint64_t> response_seq{0};  // response ids: unique across models and reloads
};

}  // namespace ubatch::server
