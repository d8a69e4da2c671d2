// The engine: one thread that owns the model context, KV cache, scheduler and samplers,
// and runs steps — plan (scheduler), execute (one decode of up to n_batch tokens), sample,
// stream — while client threads submit and cancel through thread-safe calls.
// No lock is held across a forward pass.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>

#include "common/status.h"
#include "sched/active_requests.h"
#include "sched/latency_window.h"
#include "sched/metrics.h"
#include "sched/request.h"
#include "sched/step_time_model.h"
#include "sched/step_gate.h"
#include "sched/step_log.h"

namespace ubatch {
class Context;
class Tokenizer;
namespace grammar {
class GrammarCache;
}
}  // namespace ubatch

namespace ubatch::sched {

enum class Policy { Static, Grouped, UBatch };
const char* policy_name(Policy p);
bool parse_policy(const std::string& s, Policy& out);

struct EngineConfig {
  Policy policy = Policy::UBatch;
  int32_t n_parallel = 16;         // most sequences decoding at once (default: docs/BENCHMARKS.md, tuning)
  int32_t n_batch = 128;           // token budget per step (default: docs/BENCHMARKS.md, tuning)
  int32_t max_queue = 256;         // waiting requests before submit() rejects
  double batch_window_ms = 0.0;    // hold a small batch this long to gather more (0: never)
  double lambda = 1.0;             // weight of the latency penalty in the objective
  double mu = 1.0;                 // weight of the cache-hit bonus in the objective
  double aging_ms = 2000.0;        // waiting this long raises effective priority by one level
  // Preemption for rank (policy ubatch; docs/SCHEDULER.md): a waiting request whose priority is
  // at least a running sequence's rank + preempt_margin takes its place when no slot or KV room
  // is free, once that sequence has run preempt_min_run_ms since its (re)admission.
  int32_t preempt_margin = 1;       // levels; 0: never preempt for priority
  double preempt_min_run_ms = 500;  // a sequence runs at least this long before it may be displaced
  // Speculative decoding without a draft model (docs/ARCHITECTURE.md, "Speculative decoding"):
  // prompt-lookup drafts verified in the normal batch, with output identical to plain
  // decoding; each step drafts only where the step-time model says it pays (spec_policy.h).
  int32_t spec_ngram = 4;          // longest n-gram matched against the sequence's own tokens (0: off)
  int32_t spec_k = 16;             // most draft tokens per sequence per step (0: off)
                                   // (defaults: docs/BENCHMARKS.md, "Speculative decoding")
  int32_t spec_table = 0;          // entries of the server-wide n-gram table of finished outputs (0: off)
  double spec_margin = 0.1;        // a draft token must promise this share more than break-even
  bool spec_always = false;        // draft every available draft (up to spec_k, budget, KV), without the
                                   // step-time decision: fixed-k speculation, for comparison and tests
  // Shape a : b : c of the step-time model's prior (step_time_model.h; its scale follows the
  // measured steps): from steps of the default model on 2 threads (docs/BENCHMARKS.md).
  StepCost step_cost_prior{1.0, 0.04, 0.04};
  int32_t max_tokens_cap = 1 << 20;
  int32_t n_ctx_seq = 0;           // most tokens one sequence may hold, prompt + generated
                                   // (0: the whole KV cache; serve: the model's trained context)
  // Shared by the engines of one server (one per loaded model): each step runs while holding it,
  // so engines with work take turns, every step on all threads (step_gate.h). Null: alone.
  std::shared_ptr<StepGate> step_gate;
};

class Engine {
 public:
  // ctx and tokenizer must outlive the engine. Starts the engine thread.
  Engine(Context& ctx, const Tokenizer& tokenizer, const EngineConfig& config);
  ~Engine();  // stops the thread; unfinished requests end with FinishReason::Cancelled
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Thread-safe. On success the request is queued and its stream will end with Done.
  // Errors: QueueFull (max_queue waiting), TooLong (prompt + max_tokens can never fit the
  // cache, or the prompt exceeds n_ctx), Invalid (empty prompt, bad ids or parameters).
  // A strict deadline the scheduler cannot meet is refused on the engine thread, within one
  // step: the stream then holds only a Done event whose `rejection` says why.
  struct Submitted {
    std::shared_ptr<Stream> stream;
    std::string error_message;
    SubmitError::Code error_code = SubmitError::Code::Invalid;
    bool ok() const { return stream != nullptr; }
  };
  Submitted submit(Request request);

  // Thread-safe. Ends the request (FinishReason::Cancelled) and frees its KV within one step.
  void cancel(uint64_t id);

  // Thread-safe snapshot.
  MetricsSnapshot metrics() const;

  // Thread-safe, cheap (one atomic load): requests submitted and not yet scheduled — the
  // count submit() compares with max_queue. queued() >= config().max_queue: saturated, the
  // next submit() fails with QueueFull.
  int64_t queued() const;

  const EngineConfig& config() const;
  int32_t n_ctx() const;      // KV cache capacity in tokens, all sequences together
  int32_t n_ctx_seq() const;  // most tokens one request's sequence may hold (<= n_ctx())
  int32_t n_vocab() const;
  int32_t n_embd() const;     // width of a final hidden state (embedding requests' vectors)
  // The pooling the model file names (<arch>.pooling_type 1 mean, 2 cls, 3 last): set in an
  // embedding model's file; None when the file has no such key (or says 0, none).
  Pooling model_pooling() const;

  // Thread-safe. Compiles grammars for this engine's vocabulary, keeping recent ones
  // (Request::grammar takes what it returns).
  grammar::GrammarCache& grammars();

  // What the engine runs on, for display (the context's settings).
  struct Info {
    int32_t n_ubatch = 0;       // most tokens per forward pass
    int32_t n_threads = 0;      // compute threads
    std::string kv_type;        // as --kv-type spells it: "f16", "f32", "q8_0"
    std::string state_type;     // as --state-type spells it: "f32", "bf16" (recurrent models' state)
    int32_t kv_block_size = 0;  // token slots per KV block
    int32_t kv_blocks = 0;      // KV blocks in the cache
  };
  Info info() const;

  // Live views (the server's dashboard; docs/API.md, "GET /v1/dashboard/events"). Thread-safe
  // and cheap: a reader holds a lock the engine thread also takes for at most one copy of what
  // it reads, never across a forward pass.
  //
  // The engine clock (steady, ms): StepRecord::end_ms and the latency window use it.
  double now_ms() const;
  // One record per step that ran (pushed by the engine thread after each step).
  const StepLog& step_log() const;
  // TTFT and ITL percentiles over the last minute.
  LatencyLastMinute latency_last_minute() const;
  // The requests queued or running. The engine builds this table only while someone reads
  // it: a call marks interest for kRequestsDemandMs, during which the engine publishes after
  // a step at most every kRequestsPublishMs; it also publishes the empty table when it goes
  // idle. So rows are at most kRequestsPublishMs + one step old when read at least every
  // kRequestsDemandMs; a first read (or one after a pause) may see rows that old.
  static constexpr double kRequestsDemandMs = 3000;
  static constexpr double kRequestsPublishMs = 100;
  ActiveRequests active_requests() const;
  // Engine-thread time spent building and publishing that table (ms, since start): the
  // live views' only engine-thread work besides one StepLog::push per step and two
  // LatencyWindow observations per token.
  double live_view_ms() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ubatch::sched
