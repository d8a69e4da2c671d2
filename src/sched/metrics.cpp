#include "sched/metrics.h"

#include <algorithm>
#include <cmath>
#include <fmt/format.h>

namespace ubatch::sched {

namespace {
constexpr size_t kRecent = 4096;  // observations kept for percentiles
}

void Histogram::observe(double ms) {
  ++count;
  sum_ms += ms;
  for (size_t i = 0; i < kBoundsMs.size(); ++i)
    if (ms <= kBoundsMs[i]) {
      ++buckets[i];
      break;
    }
  if (recent.size() >= kRecent) recent.erase(recent.begin(), recent.begin() + kRecent / 2);
  recent.push_back(ms);
}

double Histogram::percentile(double p) const {
  if (recent.empty()) return 0.0;
  std::vector<double> v = recent;
  std::sort(v.begin(), v.end());
  // Nearest-rank percentile.
  const double rank = std::ceil(p / 100.0 * static_cast<double>(v.size()));
  const size_t i = static_cast<size_t>(std::clamp(rank, 1.0, static_cast<double>(v.size()))) - 1;
  return v[i];
}

std::string perf_summary(const MetricsSnapshot& m, double wall_ms) {
  std::string out;
  out += fmt::format("perf: requests        {} finished ({} cancelled, {} failed), {} rejected\n", m.requests_finished,
       m.requests_cancelled, m.requests_failed, m.requests_rejected);
  out += fmt::format("perf: rejected        {} queue full, {} too long, {} invalid, {} deadline unattainable\n",
       m.rejected_queue_full, m.rejected_too_long, m.rejected_invalid, m.rejected_deadline);
  out += fmt::format("perf: deadline misses {} ({} while queued, {} while running)\n",
       m.deadline_misses_queued + m.deadline_misses_running, m.deadline_misses_queued, m.deadline_misses_running);
  out += fmt::format("perf: prompt tokens   {} computed, {} from the prefix cache (hit rate {:.1f}%)\n", m.prompt_tokens,
       m.cached_prompt_tokens, 100.0 * m.prefix_hit_rate);
  out += fmt::format("perf: generated       {} tokens, {:.2f} tokens/s over {:.1f} s busy ({:.1f} s wall)\n", m.generated_tokens,
       m.busy_ms > 0 ? 1000.0 * m.generated_tokens / m.busy_ms : 0.0, m.busy_ms / 1000.0, wall_ms / 1000.0);
  out += fmt::format("perf: steps           {}, {:.1f} tokens/step, batch fill {:.1f}%\n", m.steps,
       m.steps ? double(m.step_tokens) / m.steps : 0.0, 100.0 * m.batch_fill());
  out += fmt::format("perf: TTFT ms         p50 {:.1f}  p99 {:.1f}  (n {})\n", m.ttft.percentile(50), m.ttft.percentile(99), m.ttft.count);
  out += fmt::format("perf: TPOT ms         p50 {:.1f}  p99 {:.1f}\n", m.tpot.percentile(50), m.tpot.percentile(99));
  out += fmt::format("perf: queue ms        p50 {:.1f}  p99 {:.1f}\n", m.queue_time.percentile(50), m.queue_time.percentile(99));
  out += fmt::format("perf: KV blocks       {} used now, peak {} of {} ({} tokens/block), {} cached\n", m.kv_blocks_used,
       m.kv_peak_blocks_used, m.kv_blocks_total, m.kv_block_size, m.kv_blocks_cached);
  out += fmt::format("perf: preemptions     {} ({} memory, {} priority)\n", m.preemptions, m.preemptions_memory,
       m.preemptions_priority);
  if (m.grammar_rows > 0)
    out += fmt::format("perf: grammar masks   {:.2f} ms over {} constrained rows ({:.3f} ms/row), {:.2f}% of busy time\n",
                       m.grammar_ms, m.grammar_rows, m.grammar_ms / static_cast<double>(m.grammar_rows),
                       m.busy_ms > 0 ? 100.0 * m.grammar_ms / m.busy_ms : 0.0);
  out += fmt::format("perf: speculation     {} draft tokens in {} steps, {} accepted ({:.1f}%); {:.2f} tokens/step per "
                     "sequence\n", m.draft_tokens, m.spec_steps, m.draft_accepted, 100.0 * m.draft_acceptance(),
                     m.tokens_per_seq_step());
  out += fmt::format("perf: step model      {:.3f} ms + {:.4f} ms/token + {:.4f} ms/logits row\n", m.step_cost.a_ms,
                     m.step_cost.b_ms_per_token, m.step_cost.c_ms_per_row);
  return out;
}

}  // namespace ubatch::sched
