#include "sched/step_log.h"

#include <algorithm>

#include "common/status.h"

namespace ubatch::sched {

StepLog::StepLog(size_t capacity) : ring_(std::max<size_t>(capacity, 1)) {}

void StepLog::push(const StepRecord& r) {
  std::lock_guard<std::mutex> lock(mutex_);
  UBATCH_CHECK_MSG(r.index == n_ + 1, "step log: records must be pushed in order");
  ring_[static_cast<size_t>((r.index - 1) % ring_.size())] = r;
  n_ = r.index;
}

uint64_t StepLog::read(uint64_t after, size_t max, std::vector<StepRecord>& out) const {
  std::lock_guard<std::mutex> lock(mutex_);
  if (after >= n_ || max == 0) return n_;
  const uint64_t oldest_kept = n_ >= ring_.size() ? n_ - ring_.size() + 1 : 1;
  uint64_t first = std::max(after + 1, oldest_kept);
  if (n_ - first + 1 > max) first = n_ - max + 1;
  for (uint64_t i = first; i <= n_; ++i) out.push_back(ring_[static_cast<size_t>((i - 1) % ring_.size())]);
  return n_;
}

uint64_t StepLog::n_steps() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return n_;
}

}  // namespace ubatch::sched
