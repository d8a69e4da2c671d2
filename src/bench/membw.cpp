#include "bench/membw.h"

#include <algorithm>
#include <chrono>
#include <fmt/format.h>
#include <fstream>
#include <memory>
#include <new>
#include <string>

#include "context/context.h"

namespace ubatch::bench {

namespace {

// "32K", "4096K", "300M", "1G" (sysfs cache sizes) → bytes; 0 on anything else.
size_t parse_cache_size(const std::string& s) {
  size_t used = 0;
  unsigned long long v = 0;
  try {
    v = std::stoull(s, &used);
  } catch (...) {
    return 0;
  }
  const std::string unit = s.substr(used);
  if (unit.empty()) return v;
  if (unit[0] == 'K') return v << 10;
  if (unit[0] == 'M') return v << 20;
  if (unit[0] == 'G') return v << 30;
  return 0;
}

// Pass over [begin, end): sum of the words, so the loads are live. Four partial sums let the
// compiler keep several loads in flight.
uint64_t sum_words(const uint64_t* begin, const uint64_t* end) {
  uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
  const uint64_t* p = begin;
  for (; p + 4 <= end; p += 4) {
    s0 += p[0];
    s1 += p[1];
    s2 += p[2];
    s3 += p[3];
  }
  for (; p < end; ++p) s0 += *p;
  return s0 + s1 + s2 + s3;
}

}  // namespace

size_t last_level_cache_bytes() {
  size_t best = 0;
  int best_level = -1;
  for (int i = 0; i < 16; ++i) {
    const std::string dir = fmt::format("/sys/devices/system/cpu/cpu0/cache/index{}/", i);
    std::ifstream level_in(dir + "level"), size_in(dir + "size"), type_in(dir + "type");
    if (!level_in || !size_in) break;
    int level = 0;
    std::string size, type;
    level_in >> level;
    size_in >> size;
    type_in >> type;
    if (type == "Instruction") continue;
    if (level > best_level) {
      best_level = level;
      best = parse_cache_size(size);
    }
  }
  return best;
}

size_t default_bandwidth_buffer_bytes() {
  size_t bytes = std::max<size_t>(size_t{1} << 30, 4 * last_level_cache_bytes());
  const uint64_t avail = available_memory_bytes();
  if (avail > 0) bytes = std::min<size_t>(bytes, avail / 4);
  return std::max<size_t>(bytes, size_t{64} << 20);
}

Result<BandwidthResult> measure_read_bandwidth(kernels::ThreadPool& pool, size_t buffer_bytes, int n_runs) {
  if (buffer_bytes < (size_t{1} << 20))
    return Status::error(fmt::format("bandwidth probe: buffer of {} bytes is below 1 MiB", buffer_bytes));
  if (n_runs < 1) return Status::error("bandwidth probe: need at least one run");
  const size_t n_words = buffer_bytes / sizeof(uint64_t);
  std::unique_ptr<uint64_t[]> buf(new (std::nothrow) uint64_t[n_words]);
  if (!buf) return Status::error(fmt::format("bandwidth probe: cannot allocate {} MiB", buffer_bytes >> 20));
  uint64_t* data = buf.get();
  const int nth = pool.n_threads();
  // Each thread touches the share it will read (first-touch placement), with non-zero words.
  pool.run([&](int ith, int n) {
    int64_t b = 0, e = 0;
    kernels::ThreadPool::split(static_cast<int64_t>(n_words), ith, n, b, e);
    for (int64_t i = b; i < e; ++i) data[i] = static_cast<uint64_t>(i) * 0x9E3779B97F4A7C15ull + 1;
  });
  std::vector<uint64_t> sums(static_cast<size_t>(nth), 0);
  BandwidthResult r;
  r.buffer_bytes = n_words * sizeof(uint64_t);
  r.n_threads = nth;
  r.n_runs = n_runs;
  double sum_gbps = 0.0;
  for (int run = 0; run < n_runs; ++run) {
    const auto t0 = std::chrono::steady_clock::now();
    pool.run([&](int ith, int n) {
      int64_t b = 0, e = 0;
      kernels::ThreadPool::split(static_cast<int64_t>(n_words), ith, n, b, e);
      sums[static_cast<size_t>(ith)] += sum_words(data + b, data + e);
    });
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const double gbps = s > 0 ? static_cast<double>(r.buffer_bytes) / s / 1e9 : 0.0;
    r.gbps = std::max(r.gbps, gbps);
    sum_gbps += gbps;
  }
  r.mean_gbps = sum_gbps / n_runs;
  // Keep the sums observable so the passes are not optimized away.
  volatile uint64_t sink = 0;
  for (uint64_t s : sums) sink = sink + s;
  (void)sink;
  return r;
}

}  // namespace ubatch::bench
