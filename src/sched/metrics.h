// Engine metrics: counters, gauges and latency histograms, updated by the engine thread and
// read as snapshots from any thread (the server exports them in Prometheus text format).
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "sched/step_time_model.h"

namespace ubatch::sched {

// Fixed-bucket histogram of milliseconds (cumulative counts per upper bound, Prometheus-style).
struct Histogram {
  static constexpr std::array<double, 16> kBoundsMs = {1, 2.5, 5, 10, 25, 50, 100, 250, 500, 1000,
                                                      2500, 5000, 10000, 30000, 60000, 300000};
  std::array<uint64_t, kBoundsMs.size()> buckets{};  // count of observations <= bound (non-cumulative per bucket)
  uint64_t count = 0;
  double sum_ms = 0;
  std::vector<double> recent;  // last observations (bounded), for percentiles
  void observe(double ms);
  double percentile(double p) const;  // from `recent`; 0 when empty
};

struct MetricsSnapshot {
  // Counters.
  uint64_t requests_submitted = 0;
  uint64_t requests_finished = 0;   // any finish reason
  uint64_t requests_cancelled = 0;
  uint64_t requests_failed = 0;
  uint64_t requests_rejected = 0;   // at submit or admission, all causes (the four below)
  uint64_t rejected_queue_full = 0;
  uint64_t rejected_too_long = 0;
  uint64_t rejected_invalid = 0;    // invalid parameters, or the engine shutting down
  uint64_t rejected_deadline = 0;   // a strict deadline the estimate says cannot be met
  uint64_t deadline_misses_queued = 0;   // strict deadline passed before the request was scheduled
  uint64_t deadline_misses_running = 0;  // strict deadline passed after it was scheduled
  uint64_t prompt_tokens = 0;       // prompt tokens processed (prefilled, not counting cache hits)
  uint64_t cached_prompt_tokens = 0;
  uint64_t generated_tokens = 0;
  uint64_t steps = 0;
  uint64_t step_tokens = 0;         // tokens run in all steps
  uint64_t step_budget = 0;         // n_batch × steps (batch fill = step_tokens / step_budget)
  uint64_t preemptions = 0;           // all causes (the two below)
  uint64_t preemptions_memory = 0;    // a decode found no KV room
  uint64_t preemptions_priority = 0;  // a waiting request outranked it (no slot or KV room)
  double busy_ms = 0;               // time spent in steps
  double grammar_ms = 0;            // of busy_ms: on grammars (masks, masking logits, advancing), all rows
  uint64_t grammar_rows = 0;        // rows sampled under a grammar
  // Speculative decoding.
  uint64_t sample_seq_steps = 0;    // (sequence, step) pairs that sampled at least one token
  uint64_t spec_steps = 0;          // steps that verified at least one draft
  uint64_t spec_seq_steps = 0;      // (sequence, step) pairs that verified a draft
  uint64_t draft_tokens = 0;        // draft tokens verified
  uint64_t draft_accepted = 0;      // draft tokens accepted (equal to the token sampled there)
  // Gauges.
  int64_t queued = 0;
  int64_t running = 0;
  int64_t kv_blocks_used = 0;
  int64_t kv_blocks_cached = 0;
  int64_t kv_blocks_total = 0;
  int64_t kv_block_size = 0;
  int64_t kv_peak_blocks_used = 0;
  double prefix_hit_rate = 0;
  // Recurrent state (models with recurrent layers; 0 otherwise), bytes: the sequences' live
  // states, their checkpoints, and the prefix snapshots (count too).
  int64_t state_bytes = 0;
  int64_t state_checkpoint_bytes = 0;
  int64_t state_snapshot_bytes = 0;
  int64_t state_snapshots = 0;
  // Distributions.
  Histogram ttft, tpot, queue_time, e2e;
  StepCost step_cost;               // the scheduler's step-time model now (step_time_model.h)
  double batch_fill() const { return step_budget ? double(step_tokens) / double(step_budget) : 0.0; }
  double draft_acceptance() const { return draft_tokens ? double(draft_accepted) / double(draft_tokens) : 0.0; }
  // Tokens generated per (sequence, step) that sampled: 1 without speculation.
  double tokens_per_seq_step() const {
    return sample_seq_steps ? double(generated_tokens) / double(sample_seq_steps) : 0.0;
  }
};

// Multi-line human-readable summary (the `--perf` report printed at exit): steps, tokens,
// throughput, batch fill, TTFT/TPOT/queue percentiles, KV usage, prefix hit rate, preemptions
// by cause, deadline misses, rejections by cause, speculative decoding (draft acceptance,
// tokens per step per sequence, the step-time model).
std::string perf_summary(const MetricsSnapshot& m, double wall_ms);

}  // namespace ubatch::sched
