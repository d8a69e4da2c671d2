#include "sched/spec_policy.h"

#include <algorithm>
#include <cmath>
#include <queue>

namespace ubatch::sched {

void AcceptanceCounts::add(int32_t n_accepted, int32_t n_draft, double decay) {
  if (n_draft <= 0) return;
  relax(decay);
  accepted += n_accepted;
  verified += n_accepted + (n_accepted < n_draft ? 1 : 0);
}

void AcceptanceCounts::relax(double decay) {
  accepted *= decay;
  verified *= decay;
}

DraftChoice choose_drafts(const StepCost& cost, int64_t tokens, int64_t rows, const std::vector<DraftOption>& options,
                          int32_t budget, double margin) {
  DraftChoice out;
  out.len.assign(options.size(), 0);
  out.expected_tokens = static_cast<double>(rows);
  out.step_ms = cost.ms(static_cast<double>(tokens), static_cast<double>(rows));
  const double per_token_ms = cost.b_ms_per_token + cost.c_ms_per_row;  // one draft token: a token and a row
  // (marginal gain of the option's next draft token, option index)
  std::priority_queue<std::pair<double, size_t>> next;
  for (size_t i = 0; i < options.size(); ++i) {
    const double p = std::clamp(options[i].p, 0.0, 1.0);
    if (options[i].max_len > 0 && p > 0) next.push({p, i});
  }
  while (budget > 0 && !next.empty()) {
    const auto [gain, i] = next.top();
    next.pop();
    // Adding one token changes the rate from E/t to (E + gain)/(t + per_token_ms): it rises
    // iff gain > per_token_ms · E / t.
    if (!(out.step_ms > 0) || gain <= (1.0 + margin) * per_token_ms * out.expected_tokens / out.step_ms) break;
    ++out.len[i];
    out.expected_tokens += gain;
    out.step_ms += per_token_ms;
    --budget;
    if (out.len[i] < options[i].max_len) next.push({gain * std::clamp(options[i].p, 0.0, 1.0), i});
  }
  return out;
}

}  // namespace ubatch::sched
