#include "bench/stats.h"

#include <algorithm>
#include <cmath>

namespace ubatch::bench {

double mean(const std::vector<double>& x) {
  if (x.empty()) return 0.0;
  double s = 0.0;
  for (double v : x) s += v;
  return s / static_cast<double>(x.size());
}

double stddev(const std::vector<double>& x) {
  if (x.size() < 2) return 0.0;
  const double m = mean(x);
  double ss = 0.0;
  for (double v : x) ss += (v - m) * (v - m);
  return std::sqrt(ss / static_cast<double>(x.size() - 1));
}

namespace {
// x sorted ascending, not empty.
double percentile_sorted(const std::vector<double>& x, double p) {
  p = std::clamp(p, 0.0, 100.0);
  const double h = static_cast<double>(x.size() - 1) * p / 100.0;
  const size_t lo = static_cast<size_t>(std::floor(h));
  if (lo + 1 >= x.size()) return x.back();
  return x[lo] + (h - static_cast<double>(lo)) * (x[lo + 1] - x[lo]);
}
}  // namespace

double percentile(std::vector<double> x, double p) {
  if (x.empty()) return 0.0;
  std::sort(x.begin(), x.end());
  return percentile_sorted(x, p);
}

Summary summarize(std::vector<double> x) {
  Summary s;
  if (x.empty()) return s;
  std::sort(x.begin(), x.end());
  s.n = x.size();
  s.mean = mean(x);
  s.sd = stddev(x);
  s.min = x.front();
  s.max = x.back();
  s.p50 = percentile_sorted(x, 50);
  s.p90 = percentile_sorted(x, 90);
  s.p95 = percentile_sorted(x, 95);
  s.p99 = percentile_sorted(x, 99);
  return s;
}

}  // namespace ubatch::bench
