// Per-class results of `ubatch load` with a priority/deadline mix (--urgent-share): the urgent
// class and the rest, each with its deadline misses and latencies, and the requests lost —
// those that ended with neither a response nor a deadline outcome (a refused or missed
// deadline is an answer; a dropped connection, a cut stream or another HTTP error is not).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "loadgen/load_client.h"
#include "bench/stats.h"

namespace ubatch::loadgen {

using bench::Summary;
using bench::summarize;

struct ClassReport {
  int64_t n_started = 0, n_completed = 0, n_errors = 0;
  int64_t n_with_deadline = 0;    // requests sent with a deadline
  int64_t n_deadline_missed = 0;  // RequestResult::deadline_missed()
  int64_t n_lost = 0;             // errors that are not deadline outcomes
  Summary ttft_ms, e2e_ms;        // over completed requests (TTFT: those that got text)
  // Missed / sent with a deadline; 0 when none had one.
  double deadline_miss_rate() const {
    return n_with_deadline ? static_cast<double>(n_deadline_missed) / static_cast<double>(n_with_deadline) : 0.0;
  }
};

// True for a request that ended with neither a response nor a deadline outcome.
bool is_lost(const RequestResult& r);

// The requests of one class (urgent or not).
ClassReport summarize_class(const std::vector<RequestResult>& requests, bool urgent);

nlohmann::json to_json(const ClassReport& c);
// One line for the terminal: "  urgent   n …, deadline missed …, TTFT p50/p99 …".
std::string format_class(const std::string& name, const ClassReport& c);

}  // namespace ubatch::loadgen
