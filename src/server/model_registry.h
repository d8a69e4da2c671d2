// The models one server may serve, and which of them are loaded: names and files, the loaded
// state (unloaded, loading, loaded), loading on demand within a memory budget, and unloading the
// least recently used idle model to make room. Each loaded model is its own engine (scheduler,
// KV cache, prefix cache, engine thread) and tokenizer, built by a ModelLoader the caller gives
// (`ubatch serve`: src/tools/serve_models.cpp), so the server still knows only the scheduler.
//
// Requests hold a Lease on the model that answers them; a model with a lease out is never
// unloaded. A request for an unloaded model waits (acquire's callback) while a loader thread
// makes room and loads it; it gives up at its `give_up` time. Docs: docs/API.md ("Several
// models"), docs/DEPLOY.md (memory budget).
//
// Threads: every method is thread-safe. Callbacks run on the caller's thread when the model is
// loaded, else on the loader thread: they must not block (post to the connection's strand).
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "common/status.h"
#include "server/backend.h"

namespace ubatch::server {

// One model the server may serve.
struct ModelInfo {
  std::string name;           // id in /v1/models and the request's "model"
  std::string path;           // GGUF file ("" : attached by HttpServer::set_backend)
  std::string arch;           // general.architecture
  uint64_t file_bytes = 0;    // size of the file
  uint64_t memory_bytes = 0;  // what loading it takes: weights + KV cache + packed copies (estimate)
};

// A model loaded for serving, owned by its loader: the engine and the tokenizer it runs with.
// Destroying it stops its engine (requests still in it end Cancelled).
class LoadedModel {
 public:
  virtual ~LoadedModel() = default;
  virtual sched::Engine& engine() = 0;
  virtual const Tokenizer& tokenizer() const = 0;
};
using ModelLoader = std::function<Result<std::unique_ptr<LoadedModel>>(const ModelInfo&)>;

enum class ModelState { Unloaded, Loading, Loaded };
const char* model_state_name(ModelState s);  // "unloaded", "loading", "loaded"

// What a request asks for; a request without "model" goes to that kind's default.
enum class RequestKind { Chat, Completion, Other };

struct RegistryOptions {
  uint64_t budget_bytes = 0;         // most memory_bytes loaded at once (0: no limit)
  std::string chat_template;         // --chat-template, for every model ("" : each model's own)
  std::string default_chat;          // model for chat requests without "model" ("" : the first)
  std::string default_completion;    // for completions, embeddings and the rest ("" : the first)
};

class ModelRegistry {
 public:
  using Clock = std::chrono::steady_clock;
  // Keeps its model loaded while held.
  using Lease = std::shared_ptr<const Backend>;
  enum class Failure { None, NotLoaded, LoadFailed, Timeout, ShuttingDown };
  struct Acquired {
    Lease backend;  // null on failure
    Failure failure = Failure::None;
    std::string message;  // why, on failure
  };
  using Callback = std::function<void(Acquired)>;

  // One model, attached later by attach() (never loaded nor unloaded here).
  ModelRegistry(std::string name, std::string chat_template);
  // Several models, loaded on demand by `loader` (which may be called on the loader thread).
  ModelRegistry(std::vector<ModelInfo> models, ModelLoader loader, RegistryOptions options);
  ~ModelRegistry();  // stop(), then unloads every model
  ModelRegistry(const ModelRegistry&) = delete;
  ModelRegistry& operator=(const ModelRegistry&) = delete;

  // Error when a model needs more than the whole budget (it could never be loaded), naming it,
  // its estimate and the budget; or when a default names no model.
  Status check() const;
  // The single model's engine and tokenizer (first constructor); both must outlive the registry.
  void attach(sched::Engine& engine, const Tokenizer& tokenizer);
  // Loads models in order (the defaults first) while they fit the budget without unloading
  // any; blocks. Logs each load; a model that fails to load is logged and stays unloaded.
  // Error, naming each model and why, when no model loaded (every one failed): nothing can
  // serve (`ubatch serve` exits).
  Status preload();

  size_t size() const { return entries_.size(); }
  const ModelInfo& info(size_t index) const { return entries_[index].info; }
  // The model a request names: with one model, any name (or none); else the exact name, or
  // the kind's default when `requested` is empty. nullopt: no such model.
  std::optional<size_t> resolve(const std::string& requested, RequestKind kind) const;

  // Calls `done` once with a lease on the model, loading it first when needed (a load that
  // is still waiting at `give_up` fails with Timeout). With no loader (attach mode) a model
  // not yet attached fails at once with NotLoaded.
  void acquire(size_t index, Clock::time_point give_up, Callback done);
  // A lease when the model is loaded now, else null. `touch` false: a look that does not count
  // as a use (health, metrics, listings: the LRU order stays as requests left it).
  Lease try_acquire(size_t index, bool touch = true);
  // True while a load waits for this (busy) model to become idle so that it can be unloaded:
  // long-lived holders of a lease (dashboard streams) let go when they see it.
  bool unload_wanted(size_t index) const;

  struct Row {
    ModelInfo info;
    ModelState state = ModelState::Unloaded;
    int64_t in_use = 0;   // leases out (requests being answered)
    int64_t waiting = 0;  // requests waiting for it to load
    uint64_t loads = 0, unloads = 0;
    std::string error;    // the last load's error ("" : none)
  };
  std::vector<Row> rows() const;
  uint64_t budget_bytes() const { return options_.budget_bytes; }
  uint64_t loaded_bytes() const;  // memory_bytes of the models loaded or loading
  // At least one model serves: one is loaded, or (on-demand mode) start-up loading is over and
  // some model did not fail its last load (it loads on demand).
  bool serving() const;
  // Why none serves, for /health: Loading (start-up loading is not over), NoModel (every model
  // failed its last load; `reason` names each with its error) or ShuttingDown; None when one serves.
  enum class Readiness { None, Loading, NoModel, ShuttingDown };
  Readiness readiness(std::string* reason = nullptr) const;
  // Fails every waiting request (ShuttingDown) and ends the loader thread. Idempotent.
  void stop();

 private:
  struct Waiter {
    Clock::time_point give_up;
    Callback done;
  };
  struct Entry {
    ModelInfo info;
    ModelState state = ModelState::Unloaded;
    std::unique_ptr<LoadedModel> loaded;
    std::unique_ptr<Backend> backend;
    int64_t in_use = 0;
    uint64_t last_used = 0;  // tick of the last acquire or release (LRU order)
    bool unload_wanted = false;
    uint64_t loads = 0, unloads = 0;
    std::string error;
    std::vector<Waiter> waiters;
  };
  using Calls = std::vector<std::pair<Callback, Acquired>>;

  Lease lease_locked(size_t index, bool touch = true);
  uint64_t loaded_bytes_locked() const;
  void release(size_t index, bool touch);
  void loader_loop();
  // Unloads idle models (least recently used first) until `need` more bytes fit; false (and
  // nothing unloaded) when they cannot. Unloaded models are moved to `gone`.
  bool make_room_locked(size_t for_index, std::vector<std::unique_ptr<LoadedModel>>& gone);
  // Loads entry `index` (state Loading, lock released during the load) and answers its waiters.
  void load_unlocked(size_t index, Calls& calls);
  static void call_all(Calls& calls);

  std::vector<Entry> entries_;
  ModelLoader loader_;
  RegistryOptions options_;
  mutable std::mutex mutex_;
  std::condition_variable cv_;
  uint64_t tick_ = 0;
  bool stopping_ = false;
  bool preloaded_ = false;
  bool load_running_ = false;  // load_thread_ is loading a model
  std::thread thread_;         // the loader: picks what to load, makes room, times waiters out
  std::thread load_thread_;    // the load under way (joined before the next one starts)
};

}  // namespace ubatch::server
