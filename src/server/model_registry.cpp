#include "server/model_registry.h"

#include <algorithm>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "sched/engine.h"

namespace ubatch::server {

namespace {

double mib(uint64_t bytes) { return static_cast<double>(bytes) / (1024.0 * 1024.0); }

}  // namespace

const char* model_state_name(ModelState s) {
  switch (s) {
    case ModelState::Unloaded: return "unloaded";
    case ModelState::Loading: return "loading";
    case ModelState::Loaded: return "loaded";
  }
  return "unloaded";
}

ModelRegistry::ModelRegistry(std::string name, std::string chat_template) {
  entries_.resize(1);
  entries_[0].info.name = std::move(name);
  options_.chat_template = std::move(chat_template);
}

ModelRegistry::ModelRegistry(std::vector<ModelInfo> models, ModelLoader loader, RegistryOptions options)
    : loader_(std::move(loader)), options_(std::move(options)) {
  entries_.resize(models.size());
  for (size_t i = 0; i < models.size(); ++i) entries_[i].info = std::move(models[i]);
  thread_ = std::thread([this] { loader_loop(); });
}

ModelRegistry::~ModelRegistry() {
  stop();
  // Engines stop here, the loaded ones in order (each joins its engine thread).
  for (Entry& e : entries_) {
    e.backend.reset();
    e.loaded.reset();
  }
}

Status ModelRegistry::check() const {
  for (const std::string& d : {options_.default_chat, options_.default_completion}) {
    if (d.empty()) continue;
    const bool found = std::any_of(entries_.begin(), entries_.end(), [&](const Entry& e) { return e.info.name == d; });
    if (!found) return Status::error(fmt::format("default model '{}' is not among the models served", d));
  }
  for (size_t i = 0; i < entries_.size(); ++i)
    for (size_t j = i + 1; j < entries_.size(); ++j)
      if (entries_[i].info.name == entries_[j].info.name)
        return Status::error(fmt::format("two models are named '{}' (give one an --alias)", entries_[i].info.name));
  if (options_.budget_bytes == 0) return Status::ok();
  for (const Entry& e : entries_)
    if (e.info.memory_bytes > options_.budget_bytes)
      return Status::error(fmt::format(
          "model '{}' ({}) needs about {:.0f} MiB loaded (weights and KV cache) but --models-memory is {:.0f} MiB: "
          "it could never be loaded (raise --models-memory, lower --n-ctx or --n-parallel, or leave the model out)",
          e.info.name, e.info.path, mib(e.info.memory_bytes), mib(options_.budget_bytes)));
  return Status::ok();
}

void ModelRegistry::attach(sched::Engine& engine, const Tokenizer& tokenizer) {
  std::lock_guard<std::mutex> lock(mutex_);
  Entry& e = entries_[0];
  if (e.state == ModelState::Loaded) return;
  e.backend = make_backend(e.info.name, engine, tokenizer, options_.chat_template);
  e.state = ModelState::Loaded;
  e.loads++;
}

Status ModelRegistry::preload() {
  if (!loader_) return Status::ok();
  std::vector<size_t> order;
  for (RequestKind kind : {RequestKind::Chat, RequestKind::Completion})
    if (std::optional<size_t> i = resolve("", kind)) order.push_back(*i);
  for (size_t i = 0; i < entries_.size(); ++i) order.push_back(i);
  std::vector<bool> tried(entries_.size(), false);  // a default is also in the list: once each
  for (size_t i : order) {
    if (tried[i]) continue;
    tried[i] = true;
    Calls calls;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (stopping_) break;
      Entry& e = entries_[i];
      if (e.state != ModelState::Unloaded) continue;
      if (options_.budget_bytes > 0 && loaded_bytes_locked() + e.info.memory_bytes > options_.budget_bytes) continue;
      e.state = ModelState::Loading;
    }
    load_unlocked(i, calls);
    call_all(calls);
  }
  std::string reason;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    preloaded_ = true;
  }
  cv_.notify_all();
  if (readiness(&reason) == Readiness::NoModel) return Status::error(reason);
  return Status::ok();
}

std::optional<size_t> ModelRegistry::resolve(const std::string& requested, RequestKind kind) const {
  if (entries_.size() == 1) return 0;
  std::string name = requested;
  if (name.empty()) name = kind == RequestKind::Chat ? options_.default_chat : options_.default_completion;
  if (name.empty()) return 0;
  for (size_t i = 0; i < entries_.size(); ++i)
    if (entries_[i].info.name == name) return i;
  return std::nullopt;
}

ModelRegistry::Lease ModelRegistry::lease_locked(size_t index, bool touch) {
  Entry& e = entries_[index];
  e.in_use++;
  if (touch) e.last_used = ++tick_;
  return Lease(e.backend.get(), [this, index, touch](const Backend*) { release(index, touch); });
}

void ModelRegistry::release(size_t index, bool touch) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    Entry& e = entries_[index];
    e.in_use--;
    if (touch) e.last_used = ++tick_;
  }
  cv_.notify_all();
}

void ModelRegistry::acquire(size_t index, Clock::time_point give_up, Callback done) {
  Acquired a;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    Entry& e = entries_[index];
    if (stopping_) {
      a.failure = Failure::ShuttingDown;
      a.message = "the server is shutting down";
    } else if (e.state == ModelState::Loaded && !e.unload_wanted) {
      a.backend = lease_locked(index);
    } else if (!loader_) {
      a.failure = Failure::NotLoaded;
      a.message = "the model is loading; retry shortly";
    } else {
      e.waiters.push_back({give_up, std::move(done)});
      cv_.notify_all();
      return;
    }
  }
  done(std::move(a));
}

ModelRegistry::Lease ModelRegistry::try_acquire(size_t index, bool touch) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (entries_[index].state != ModelState::Loaded) return nullptr;
  return lease_locked(index, touch);
}

bool ModelRegistry::unload_wanted(size_t index) const {
  std::lock_guard<std::mutex> lock(mutex_);
  return entries_[index].unload_wanted;
}

std::vector<ModelRegistry::Row> ModelRegistry::rows() const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<Row> out;
  for (const Entry& e : entries_) {
    Row r;
    r.info = e.info;
    r.state = e.state;
    r.in_use = e.in_use;
    r.waiting = static_cast<int64_t>(e.waiters.size());
    r.loads = e.loads;
    r.unloads = e.unloads;
    r.error = e.error;
    out.push_back(std::move(r));
  }
  return out;
}

uint64_t ModelRegistry::loaded_bytes_locked() const {
  uint64_t used = 0;
  for (const Entry& e : entries_)
    if (e.state != ModelState::Unloaded) used += e.info.memory_bytes;
  return used;
}

uint64_t ModelRegistry::loaded_bytes() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return loaded_bytes_locked();
}

bool ModelRegistry::serving() const { return readiness() == Readiness::None; }

ModelRegistry::Readiness ModelRegistry::readiness(std::string* reason) const {
  std::lock_guard<std::mutex> lock(mutex_);
  auto say = [reason](std::string text) {
    if (reason) *reason = std::move(text);
  };
  if (stopping_) return say("the server is shutting down"), Readiness::ShuttingDown;
  for (const Entry& e : entries_)
    if (e.state == ModelState::Loaded) return Readiness::None;
  // Attach mode: the one model is not attached yet. On demand: start-up loading goes on.
  if (!loader_ || !preloaded_) return say("the model is loading"), Readiness::Loading;
  std::string failed;
  for (const Entry& e : entries_) {
    // A model loading now, or one that did not fail, loads on demand.
    if (e.state == ModelState::Loading || e.error.empty()) return Readiness::None;
    failed += fmt::format("{}{}: {}", failed.empty() ? "" : "; ", e.info.name, e.error);
  }
  say("no model can serve: every model failed to load (" + failed + ")");
  return Readiness::NoModel;
}

void ModelRegistry::stop() {
  Calls calls;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (stopping_ && !thread_.joinable()) return;
    stopping_ = true;
    for (Entry& e : entries_) {
      for (Waiter& w : e.waiters)
        calls.emplace_back(std::move(w.done), Acquired{nullptr, Failure::ShuttingDown, "the server is shutting down"});
      e.waiters.clear();
    }
  }
  cv_.notify_all();
  call_all(calls);
  if (thread_.joinable()) thread_.join();
  if (load_thread_.joinable()) load_thread_.join();
}

void ModelRegistry::call_all(Calls& calls) {
  for (auto& [done, a] : calls) done(std::move(a));
  calls.clear();
}

bool ModelRegistry::make_room_locked(size_t for_index, std::vector<std::unique_ptr<LoadedModel>>& gone) {
  const uint64_t budget = options_.budget_bytes;
  const uint64_t need = entries_[for_index].info.memory_bytes;
  uint64_t used = loaded_bytes_locked();
  if (budget == 0 || used + need <= budget) return true;
  // Idle loaded models, least recently used first; attached ones (no loader) never go.
  std::vector<size_t> idle, busy;
  for (size_t i = 0; i < entries_.size(); ++i) {
    const Entry& e = entries_[i];
    if (i == for_index || e.state != ModelState::Loaded) continue;
    (e.in_use == 0 ? idle : busy).push_back(i);
  }
  auto lru = [this](size_t a, size_t b) { return entries_[a].last_used < entries_[b].last_used; };
  std::sort(idle.begin(), idle.end(), lru);
  std::sort(busy.begin(), busy.end(), lru);
  uint64_t freeable = 0;
  for (size_t i : idle) freeable += entries_[i].info.memory_bytes;
  if (used + need - std::min(used, freeable) > budget) {
    // Not enough idle: ask the least recently used busy model's long-lived holders to let go.
    for (size_t i : busy) entries_[i].unload_wanted = false;
    if (!busy.empty()) entries_[busy.front()].unload_wanted = true;
    return false;
  }
  for (size_t i : idle) {
    if (used + need <= budget) break;
    Entry& e = entries_[i];
    spdlog::info("model {}: unloading (least recently used idle model) to make room for {}", e.info.name,
                 entries_[for_index].info.name);
    e.backend.reset();
    gone.push_back(std::move(e.loaded));
    e.state = ModelState::Unloaded;
    e.unload_wanted = false;
    e.unloads++;
    used -= e.info.memory_bytes;
  }
  return true;
}

void ModelRegistry::load_unlocked(size_t index, Calls& calls) {
  const ModelInfo info = entries_[index].info;  // immutable after construction
  spdlog::info("model {}: loading {} (about {:.0f} MiB)", info.name, info.path, mib(info.memory_bytes));
  const auto t0 = Clock::now();
  Result<std::unique_ptr<LoadedModel>> loaded = loader_(info);
  std::unique_ptr<Backend> backend;
  if (loaded)
    backend = make_backend(info.name, loaded.value()->engine(), loaded.value()->tokenizer(), options_.chat_template);
  std::lock_guard<std::mutex> lock(mutex_);
  Entry& e = entries_[index];
  if (!loaded) {
    e.state = ModelState::Unloaded;
    e.error = loaded.message();
    spdlog::error("model {}: loading failed: {}", info.name, e.error);
    for (Waiter& w : e.waiters)
      calls.emplace_back(std::move(w.done),
                         Acquired{nullptr, Failure::LoadFailed, "model '" + info.name + "' failed to load: " + e.error});
    e.waiters.clear();
    return;
  }
  spdlog::info("model {}: loaded in {:.0f} ms; n_ctx {} (KV cells, all sequences; {} per request)", info.name,
               std::chrono::duration<double, std::milli>(Clock::now() - t0).count(), backend->kv_cells, backend->n_ctx);
  e.loaded = std::move(loaded.value());
  e.backend = std::move(backend);
  e.state = ModelState::Loaded;
  e.error.clear();
  e.loads++;
  for (Waiter& w : e.waiters) calls.emplace_back(std::move(w.done), Acquired{lease_locked(index), Failure::None, ""});
  e.waiters.clear();
}

void ModelRegistry::loader_loop() {
  std::unique_lock<std::mutex> lock(mutex_);
  while (!stopping_) {
    Calls calls;
    const Clock::time_point now = Clock::now();
    Clock::time_point wake = Clock::time_point::max();
    std::optional<size_t> next;
    for (size_t i = 0; i < entries_.size(); ++i) {
      Entry& e = entries_[i];
      // Waiters past their time give up (a load already under way goes on).
      auto expired = std::stable_partition(e.waiters.begin(), e.waiters.end(),
                                           [&](const Waiter& w) { return w.give_up > now; });
      for (auto it = expired; it != e.waiters.end(); ++it)
        calls.emplace_back(std::move(it->done),
                           Acquired{nullptr, Failure::Timeout,
                                    "model '" + e.info.name + "' did not finish loading in time (" +
                                        model_state_name(e.state) + "; other models are busy or loading)"});
      e.waiters.erase(expired, e.waiters.end());
      for (const Waiter& w : e.waiters) wake = std::min(wake, w.give_up);
      if (!next && e.state == ModelState::Unloaded && !e.waiters.empty()) next = i;
      e.unload_wanted = false;  // decided again below, by make_room_locked
    }
    std::vector<std::unique_ptr<LoadedModel>> gone;
    const bool room = next && !load_running_ && make_room_locked(*next, gone);
    // A loaded model takes new requests unless a load waits for its room: then they wait for
    // it to be unloaded and loaded again, so that its requests drain and the other model gets
    // its turn (no model starves another under a budget that holds one of them).
    for (size_t i = 0; i < entries_.size(); ++i) {
      Entry& e = entries_[i];
      if (e.state != ModelState::Loaded || e.unload_wanted || e.waiters.empty()) continue;
      for (Waiter& w : e.waiters) calls.emplace_back(std::move(w.done), Acquired{lease_locked(i), Failure::None, ""});
      e.waiters.clear();
    }
    if (room) {
      // One load at a time, on its own thread: this one goes on timing out waiters meanwhile.
      entries_[*next].state = ModelState::Loading;
      load_running_ = true;
      lock.unlock();
      call_all(calls);
      gone.clear();  // stops the unloaded engines (their requests are over: they were idle)
      if (load_thread_.joinable()) load_thread_.join();
      load_thread_ = std::thread([this, index = *next] {
        Calls done;
        load_unlocked(index, done);
        call_all(done);
        {
          std::lock_guard<std::mutex> guard(mutex_);
          load_running_ = false;
        }
        cv_.notify_all();
      });
      lock.lock();
      continue;
    }
    if (!calls.empty()) {
      lock.unlock();
      call_all(calls);
      lock.lock();
      continue;
    }
    if (wake == Clock::time_point::max())
      cv_.wait(lock);
    else
      cv_.wait_until(lock, wake);
  }
}

}  // namespace ubatch::server
