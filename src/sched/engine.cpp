#include "sched/engine.h"

#include <atomic>
#include <cctype>
#include <cmath>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

#include "context/context.h"
#include "grammar/grammar_cache.h"
#include "sched/context_runner.h"
#include "sched/scheduler.h"
#include "tokenizer/tokenizer.h"

namespace ubatch::sched {

const char* policy_name(Policy p) {
  switch (p) {
    case Policy::Static: return "static";
    case Policy::Grouped: return "grouped";
    case Policy::UBatch: return "ubatch";
  }
  return "?";
}

bool parse_policy(const std::string& s, Policy& out) {
  if (s == "static") out = Policy::Static;
  else if (s == "grouped") out = Policy::Grouped;
  else if (s == "ubatch") out = Policy::UBatch;
  else return false;
  return true;
}

struct Engine::Impl {
  Impl(Context& c, const Tokenizer& t, const EngineConfig& cfg)
      : ctx(c), tok(t), grammars(t), runner(c, t), config(cfg), sched(runner, cfg) {}

  Context& ctx;
  const Tokenizer& tok;
  grammar::GrammarCache grammars;
  ContextRunner runner;
  EngineConfig config;
  Scheduler sched;

  struct Pending {
    uint64_t id;
    Request request;
    std::shared_ptr<Stream> stream;
  };
  std::mutex mutex;
  std::condition_variable cv;
  std::vector<Pending> submits;   // guarded by mutex
  std::vector<uint64_t> cancels;  // guarded by mutex
  bool stop = false;              // guarded by mutex
  std::atomic<uint64_t> next_id{1};
  std::atomic<int64_t> queued{0};  // waiting requests (for the admission check)
  std::thread thread;

  // Live views: the request table (engine.h, active_requests()).
  RequestBoard board;
  std::vector<ActiveRequest> board_scratch;      // engine thread: rows being built
  size_t board_rows = 0;                         // engine thread: rows published last
  double board_published_ms = -1e300;            // engine thread
  std::atomic<double> board_demand_ms{-1e300};   // last read of the table (runner clock)
  std::atomic<double> live_view_ms{0};           // engine-thread time spent publishing

  void loop();
  void publish_requests();
};

// After a step: rebuild the request table when a reader asked recently and the last one is
// kRequestsPublishMs old, and publish the empty table once when the engine goes idle.
void Engine::Impl::publish_requests() {
  const double now = runner.now_ms();
  const bool idle = !sched.has_work();
  const bool wanted = now - board_demand_ms.load(std::memory_order_relaxed) < kRequestsDemandMs;
  if (idle ? board_rows == 0 : !(wanted && now - board_published_ms >= kRequestsPublishMs)) return;
  sched.active_requests(now, board_scratch);
  board_rows = board_scratch.size();
  board.publish(board_scratch, now);
  board_published_ms = now;
  const double spent = runner.now_ms() - now;
  live_view_ms.store(live_view_ms.load(std::memory_order_relaxed) + spent, std::memory_order_relaxed);
}

void Engine::Impl::loop() {
  for (;;) {
    std::vector<Pending> new_submits;
    std::vector<uint64_t> new_cancels;
    {
      std::unique_lock<std::mutex> lock(mutex);
      if (!stop && submits.empty() && cancels.empty()) {
        if (!sched.has_work()) {
          cv.wait(lock, [&] { return stop || !submits.empty() || !cancels.empty(); });
        } else if (std::isfinite(sched.hold_until_ms())) {
          // Holding a small batch: sleep to the window's end, or to an earlier deadline.
          const double wait_ms = sched.next_event_ms() - runner.now_ms();
          if (wait_ms > 0)
            cv.wait_for(lock, std::chrono::microseconds(static_cast<int64_t>(wait_ms * 1000.0)),
                        [&] { return stop || !submits.empty() || !cancels.empty(); });
        }
      }
      if (stop) break;
      new_submits.swap(submits);
      new_cancels.swap(cancels);
    }
    // A refused submit (a deadline it cannot meet) has already ended its stream.
    for (Pending& p : new_submits) (void)sched.submit(p.id, std::move(p.request), std::move(p.stream));
    for (uint64_t id : new_cancels) sched.cancel(id);
    bool ran = false;
    if (config.step_gate && sched.has_work()) {
      // Other models' engines step in turn (step_gate.h).
      struct Turn {
        StepGate& gate;
        explicit Turn(StepGate& g) : gate(g) { gate.enter(); }
        ~Turn() { gate.leave(); }
      } turn(*config.step_gate);
      ran = sched.step();
    } else {
      ran = sched.step();
    }
    publish_requests();
    {
      std::lock_guard<std::mutex> lock(mutex);
      queued.store(static_cast<int64_t>(sched.n_waiting_requests() + submits.size()));
    }
    if (!ran && sched.has_work() && !std::isfinite(sched.hold_until_ms())) {
      // Work exists but nothing could run (e.g. waiting for KV): yield briefly.
      std::unique_lock<std::mutex> lock(mutex);
      cv.wait_for(lock, std::chrono::milliseconds(1), [&] { return stop || !submits.empty() || !cancels.empty(); });
    }
  }
  // Shutdown: end everything still queued or running.
  {
    std::lock_guard<std::mutex> lock(mutex);
    for (Pending& p : submits) (void)sched.submit(p.id, std::move(p.request), std::move(p.stream));
    submits.clear();
  }
  sched.cancel_all("the engine is shutting down");
}

Engine::Engine(Context& ctx, const Tokenizer& tokenizer, const EngineConfig& config)
    : impl_(std::make_unique<Impl>(ctx, tokenizer, config)) {
  UBATCH_CHECK_MSG(config.n_parallel >= 1 && config.n_batch >= config.n_parallel,
                   "engine: need n_parallel >= 1 and n_batch >= n_parallel");
  impl_->thread = std::thread([this] { impl_->loop(); });
}

Engine::~Engine() {
  {
    std::lock_guard<std::mutex> lock(impl_->mutex);
    impl_->stop = true;
  }
  impl_->cv.notify_all();
  if (impl_->thread.joinable()) impl_->thread.join();
}

Engine::Submitted Engine::submit(Request request) {
  Submitted out;
  if (request.prompt.empty() && !request.prompt_text.empty())
    request.prompt = impl_->tok.tokenize(request.prompt_text, impl_->tok.add_bos_default(), true);
  if (std::optional<SubmitError> err = impl_->sched.validate(request)) {
    out.error_code = err->code;
    out.error_message = err->message;
    impl_->sched.note_rejected(err->code);
    return out;
  }
  std::lock_guard<std::mutex> lock(impl_->mutex);
  if (impl_->stop) {
    out.error_code = SubmitError::Code::ShuttingDown;
    out.error_message = "the engine is shutting down";
    return out;
  }
  if (impl_->queued.load() >= impl_->config.max_queue) {
    out.error_code = SubmitError::Code::QueueFull;
    out.error_message = "the request queue is full; retry later";
    impl_->sched.note_rejected(SubmitError::Code::QueueFull);
    return out;
  }
  const uint64_t id = impl_->next_id.fetch_add(1);
  out.stream = std::make_shared<Stream>(id);
  impl_->submits.push_back({id, std::move(request), out.stream});
  impl_->queued.fetch_add(1);
  impl_->cv.notify_all();
  return out;
}

void Engine::cancel(uint64_t id) {
  {
    std::lock_guard<std::mutex> lock(impl_->mutex);
    impl_->cancels.push_back(id);
  }
  impl_->cv.notify_all();
}

MetricsSnapshot Engine::metrics() const {
  MetricsSnapshot m = impl_->sched.metrics();
  return m;
}

int64_t Engine::queued() const { return impl_->queued.load(); }

const EngineConfig& Engine::config() const { return impl_->config; }
int32_t Engine::n_ctx() const { return static_cast<int32_t>(impl_->ctx.kv().n_cells()); }
int32_t Engine::n_ctx_seq() const {
  const int32_t cells = n_ctx();
  const int32_t limit = impl_->config.n_ctx_seq;
  return limit > 0 ? std::min(limit, cells) : cells;
}
int32_t Engine::n_vocab() const { return impl_->ctx.n_vocab(); }
int32_t Engine::n_embd() const { return impl_->ctx.n_embd(); }
Pooling Engine::model_pooling() const {
  const int32_t t = impl_->ctx.model().hparams().pooling_type;
  return t >= 1 && t <= 3 ? static_cast<Pooling>(t) : Pooling::None;
}
grammar::GrammarCache& Engine::grammars() { return impl_->grammars; }

Engine::Info Engine::info() const {
  Info i;
  const ContextParams& p = impl_->ctx.params();
  i.n_ubatch = p.n_ubatch;
  i.n_threads = impl_->ctx.pool().n_threads();
  i.kv_type = std::string(tensor_type_name(p.kv_type));
  for (char& c : i.kv_type) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  i.state_type = std::string(tensor_type_name(p.state_type));
  for (char& c : i.state_type) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  i.kv_block_size = impl_->ctx.kv().block_size();
  i.kv_blocks = impl_->ctx.kv().n_blocks();
  return i;
}

double Engine::now_ms() const { return impl_->runner.now_ms(); }
const StepLog& Engine::step_log() const { return impl_->sched.step_log(); }
LatencyLastMinute Engine::latency_last_minute() const { return impl_->sched.latency_last_minute(now_ms()); }

ActiveRequests Engine::active_requests() const {
  impl_->board_demand_ms.store(now_ms(), std::memory_order_relaxed);
  return impl_->board.read();
}

double Engine::live_view_ms() const { return impl_->live_view_ms.load(std::memory_order_relaxed); }

}  // namespace ubatch::sched
