// Memory read bandwidth probe: the ceiling token generation runs against.
//
// Method: a buffer several times larger than the last-level cache is filled with non-zero
// data (so every page is really backed), then every thread of the pool streams its own
// contiguous share of it, summing 64-bit words (a pure read stream; the sum is kept so the
// reads cannot be optimized away). One run = one full pass; the result is the best
// (highest) of n_runs passes, bytes / seconds, in GB/s (10^9 bytes per second).
#pragma once

#include <cstddef>
#include <cstdint>

#include "common/status.h"
#include "kernels/thread_pool.h"

namespace ubatch::bench {

// Size of the last-level cache in bytes from sysfs (/sys/devices/system/cpu/cpu0/cache),
// 0 if unknown.
size_t last_level_cache_bytes();

// Default probe size: max(1 GiB, 4 × last-level cache), at most a quarter of the available
// memory (and at least 64 MiB).
size_t default_bandwidth_buffer_bytes();

struct BandwidthResult {
  double gbps = 0.0;         // best run, 10^9 bytes/s
  double mean_gbps = 0.0;    // mean over runs
  size_t buffer_bytes = 0;
  int n_threads = 0;
  int n_runs = 0;
};

// Errors: buffer_bytes < 1 MiB, n_runs < 1, or the buffer cannot be allocated.
Result<BandwidthResult> measure_read_bandwidth(kernels::ThreadPool& pool, size_t buffer_bytes, int n_runs);

}  // namespace ubatch::bench
