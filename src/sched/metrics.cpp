#include "sched/metrics.h"

#include <algorithm>
#include <cmath>

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

}  // namespace ubatch::sched
