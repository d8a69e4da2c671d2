#include "sched/latency_window.h"

#include <algorithm>
#include <cmath>

namespace ubatch::sched {

int LatencyWindow::bin_of(double value_ms) {
  if (!(value_ms > kMinMs)) return 0;  // also NaN
  const double b = std::floor(kBinsPerOctave * std::log2(value_ms / kMinMs));
  return static_cast<int>(std::clamp(b, 0.0, static_cast<double>(kBins - 1)));
}

double LatencyWindow::bin_value(int bin) {
  return kMinMs * std::exp2((static_cast<double>(bin) + 0.5) / kBinsPerOctave);
}

namespace {
size_t slot_of(int64_t second) {
  const int64_t n = LatencyWindow::kSlots;
  return static_cast<size_t>(((second % n) + n) % n);
}
}  // namespace

void LatencyWindow::advance(int64_t second) {
  if (head_second_ == INT64_MIN) head_second_ = second - kSlots;  // every slot gets (re)labelled below
  if (second <= head_second_) return;
  // The seconds that enter the window take the slots of those that leave it.
  for (int64_t s = std::max(head_second_ + 1, second - kSlots + 1); s <= second; ++s) {
    const size_t i = slot_of(s);
    for (size_t b = 0; b < kBins; ++b) {
      total_[b] -= slots_[i][b];
      count_ -= slots_[i][b];
    }
    slots_[i].fill(0);
    slot_second_[i] = s;
  }
  head_second_ = second;
}

void LatencyWindow::observe(double now_ms, double value_ms) {
  const int64_t second = static_cast<int64_t>(std::floor(now_ms / 1000.0));
  advance(second);
  if (second <= head_second_ - kSlots) return;  // older than the window
  const size_t i = slot_of(second);
  if (slot_second_[i] != second) return;
  const int b = bin_of(value_ms);
  ++slots_[i][static_cast<size_t>(b)];
  ++total_[static_cast<size_t>(b)];
  ++count_;
}

double LatencyWindow::percentile(double p) const {
  if (count_ == 0) return 0.0;
  const uint64_t rank = std::max<uint64_t>(1, static_cast<uint64_t>(std::ceil(p / 100.0 * static_cast<double>(count_))));
  uint64_t seen = 0;
  for (int b = 0; b < kBins; ++b) {
    seen += total_[static_cast<size_t>(b)];
    if (seen >= rank) return bin_value(b);
  }
  return bin_value(kBins - 1);
}

LatencySummary LatencyWindow::summary(double now_ms) {
  advance(static_cast<int64_t>(std::floor(now_ms / 1000.0)));
  LatencySummary s;
  s.count = count_;
  s.p50_ms = percentile(50);
  s.p99_ms = percentile(99);
  return s;
}

}  // namespace ubatch::sched
