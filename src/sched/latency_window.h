// Latency percentiles over the last minute, for live views (the server's dashboard): a
// histogram per second of the runner clock, 60 of them in a ring, with a running sum of the
// seconds still in the window. Bins are log-spaced, 16 per octave from 0.01 ms (~335 s at the
// top), so a percentile is exact to the bin: within ±2.2% of the observed value.
//
// observe() and summary() are O(1) and O(bins) (400); neither allocates. Not thread-safe: the
// scheduler calls both under its metrics mutex.
#pragma once

#include <array>
#include <cstdint>

namespace ubatch::sched {

struct LatencySummary {
  uint64_t count = 0;  // observations in the window
  double p50_ms = 0;   // 0 when count is 0
  double p99_ms = 0;
};

// TTFT and ITL (gaps between successive tokens of a sample) over the last minute.
struct LatencyLastMinute {
  LatencySummary ttft, itl;
};

class LatencyWindow {
 public:
  static constexpr int kSlots = 60;              // one per second: the window is the last 60 s
  static constexpr int kBinsPerOctave = 16;
  static constexpr int kBins = 400;
  static constexpr double kMinMs = 0.01;         // bin 0 holds everything up to here

  // Records a latency of value_ms observed at now_ms (runner clock). now_ms must not go back
  // by more than the window.
  void observe(double now_ms, double value_ms);
  // Percentiles of the observations made in (now_ms - 60 s, now_ms], nearest rank.
  LatencySummary summary(double now_ms);

  static int bin_of(double value_ms);      // [0, kBins)
  static double bin_value(int bin);        // the bin's geometric middle (ms)

 private:
  void advance(int64_t second);  // expires the slots that left the window ending at `second`
  double percentile(double p) const;

  std::array<std::array<uint32_t, kBins>, kSlots> slots_{};
  std::array<int64_t, kSlots> slot_second_{};  // which second each slot holds
  std::array<uint64_t, kBins> total_{};        // sum of the slots in the window
  uint64_t count_ = 0;
  int64_t head_second_ = INT64_MIN;            // the newest second seen
};

}  // namespace ubatch::sched
