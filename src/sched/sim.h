// Simulation of the scheduler: a fake model runner whose step time follows a cost model on
// a virtual clock, and a workload driver (closed-loop users or Poisson arrivals), so the
// policies can be compared for 10–100 users in seconds (`ubatch sim`, scheduler tests).
//
// The fake runner uses the real paged KV cache for capacity, sharing and prefix reuse (with
// tiny rows), and "samples" token = hash(position, input token) mod n_vocab, so a sequence's
// output depends only on its own tokens, as with a real batch-invariant model. Rows of a
// speculative verification are checked against their drafts as ContextRunner does
// (sample_rows), and cost one `sequences` term each beyond a sequence's first row.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "sched/engine.h"
#include "sched/runner.h"

namespace ubatch::sched::sim {

// Step time in ms = a + b · tokens + c · sequences (fitted from measured steps).
struct CostModel {
  double a_ms = 4.0;
  double b_ms_per_token = 0.35;
  double c_ms_per_seq = 0.5;
  double step_ms(int64_t tokens, int64_t sequences) const { return a_ms + b_ms_per_token * tokens + c_ms_per_seq * sequences; }
};

// Least-squares fit of the cost model to measured (tokens, sequences, ms) samples.
CostModel fit_cost_model(const std::vector<std::array<double, 3>>& samples);

class FakeRunner final : public Runner {
 public:
  FakeRunner(int32_t n_vocab, int32_t n_ctx, int32_t block_size, const CostModel& cost);
  KvCache& kv() override { return *kv_; }
  int32_t n_vocab() const override { return n_vocab_; }
  DecodeResult run(const Batch& batch, std::vector<RowSample>& rows) override;
  std::string token_to_piece(int32_t id) const override;
  bool is_eog(int32_t id) const override { return eog_ >= 0 && id == eog_; }
  double now_ms() const override { return now_ms_; }

  void advance_to(double t) { if (t > now_ms_) now_ms_ = t; }
  void set_eog(int32_t id) { eog_ = id; }
  // A repetitive fake model (for speculative decoding): the next token is f(token) with
  // f = next_token(0, ·), so outputs fall into cycles that prompt lookup predicts, except at
  // positions that are multiples of surprise_every, where it skips 1 to 3 more steps of f
  // (chosen by position: a draft from the cycle is mostly wrong there, and right again after).
  // 0: off (default).
  void set_repetitive(int32_t surprise_every) { surprise_every_ = surprise_every; }
  // The token this fake model produces after `token` at position `pos`.
  int32_t model_token(int32_t pos, int32_t token) const;
  int64_t n_runs() const { return n_runs_; }
  // The token the fake model produces after `token` at position `pos`.
  static int32_t next_token(int32_t pos, int32_t token, int32_t n_vocab);

 private:
  int32_t n_vocab_;
  CostModel cost_;
  std::unique_ptr<KvCache> kv_;
  double now_ms_ = 0.0;
  int32_t eog_ = -1;
  int32_t surprise_every_ = 0;
  int64_t n_runs_ = 0;
};

struct Workload {
  int32_t n_users = 16;            // closed loop: concurrent users
  double rate_per_s = 0.0;         // > 0: open loop, Poisson arrivals at this rate instead
  int32_t n_requests = 64;         // total requests
  int32_t prompt_min = 16, prompt_max = 256;   // uniform prompt lengths (tokens)
  int32_t output_min = 16, output_max = 128;   // uniform max_tokens
  double think_ms = 0.0;           // closed loop: pause between a reply and the next request
  uint64_t seed = 1;
  int32_t priority_levels = 1;     // priorities drawn uniformly from [0, levels)
  // The urgent class: this share of requests (a seeded draw per request, independent of the
  // rest of the mix) gets urgent_priority and, when > 0, a strict deadline.
  double urgent_share = 0.0;
  int32_t urgent_priority = 10;
  int64_t urgent_deadline_ms = 0;
};

struct SimResult {
  int32_t completed = 0;
  double makespan_ms = 0;
  int64_t generated_tokens = 0;
  int64_t prompt_tokens = 0;
  double throughput_tps = 0;       // generated tokens / makespan
  double ttft_p50_ms = 0, ttft_p99_ms = 0;
  double tpot_p50_ms = 0, tpot_p99_ms = 0;
  double e2e_p50_ms = 0, e2e_p99_ms = 0;
  int64_t steps = 0;
  double batch_fill = 0;
  int64_t preemptions = 0;
  int64_t preemptions_memory = 0, preemptions_priority = 0;
  // Deadlines: requests that had one, and of those the ones that missed it (refused at
  // admission, or ended by it: finish reason deadline).
  int32_t with_deadline = 0, deadline_missed = 0, rejected = 0;
  double deadline_miss_rate() const { return with_deadline ? double(deadline_missed) / with_deadline : 0.0; }
  // The urgent class (Workload::urgent_share): requests, and TTFT over those that got a token.
  int32_t urgent = 0;
  double urgent_ttft_p50_ms = 0, urgent_ttft_p99_ms = 0;
};

// Whether request i of the workload is urgent (deterministic in seed and i).
bool is_urgent(const Workload& workload, int32_t i);

// The workload's requests, in issue order (seeded; the same for simulated and real runs).
std::vector<Request> workload_requests(const Workload& workload, int32_t n_vocab);

// Runs the workload to completion on a fresh scheduler and fake runner.
SimResult simulate(const EngineConfig& config, const CostModel& cost, const Workload& workload,
                   int32_t n_ctx = 8192, int32_t n_vocab = 32000);

}  // namespace ubatch::sched::sim
