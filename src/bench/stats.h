// Descriptive statistics for benchmark samples: mean, sample standard deviation and
// percentiles, and a Summary bundling them.
//
// Percentiles use linear interpolation between closest ranks (Hyndman & Fan 1996, definition
// 7; the default of R and NumPy): for sorted x[0..n-1] and p in [0, 100], h = (n-1)·p/100 and
// P = x[⌊h⌋] + (h − ⌊h⌋)·(x[⌊h⌋+1] − x[⌊h⌋]). So p50 of {1,2,3,4} is 2.5 and p0/p100 are
// the minimum/maximum.
#pragma once

#include <cstddef>
#include <vector>

namespace ubatch::bench {

// Arithmetic mean; 0 for no samples.
double mean(const std::vector<double>& x);
// Sample standard deviation (divisor n − 1); 0 for fewer than two samples.
double stddev(const std::vector<double>& x);
// Percentile p in [0, 100] (clamped) of x (any order); 0 for no samples.
double percentile(std::vector<double> x, double p);

struct Summary {
  size_t n = 0;  // samples
  double mean = 0, sd = 0, min = 0, max = 0;
  double p50 = 0, p90 = 0, p95 = 0, p99 = 0;
};

// All fields 0 when x is empty.
Summary summarize(std::vector<double> x);

}  // namespace ubatch::bench
