#include "loadgen/load_classes.h"

#include <fmt/format.h>

namespace ubatch::loadgen {

bool is_lost(const RequestResult& r) { return !r.ok && !r.deadline_missed(); }

ClassReport summarize_class(const std::vector<RequestResult>& requests, bool urgent) {
  ClassReport c;
  std::vector<double> ttft, e2e;
  for (const RequestResult& q : requests) {
    if (q.urgent != urgent) continue;
    ++c.n_started;
    c.n_with_deadline += q.has_deadline ? 1 : 0;
    c.n_deadline_missed += q.deadline_missed() ? 1 : 0;
    c.n_lost += is_lost(q) ? 1 : 0;
    if (!q.ok) {
      ++c.n_errors;
      continue;
    }
    ++c.n_completed;
    if (q.ttft_ms >= 0) ttft.push_back(q.ttft_ms);
    e2e.push_back(q.e2e_ms);
  }
  c.ttft_ms = summarize(std::move(ttft));
  c.e2e_ms = summarize(std::move(e2e));
  return c;
}

nlohmann::json to_json(const ClassReport& c) {
  auto summary = [](const Summary& s) {
    return nlohmann::json{{"n", s.n}, {"mean", s.mean}, {"p50", s.p50}, {"p90", s.p90}, {"p99", s.p99}, {"max", s.max}};
  };
  return {{"started", c.n_started},
          {"completed", c.n_completed},
          {"errors", c.n_errors},
          {"with_deadline", c.n_with_deadline},
          {"deadline_missed", c.n_deadline_missed},
          {"deadline_miss_rate", c.deadline_miss_rate()},
          {"lost", c.n_lost},
          {"ttft_ms", summary(c.ttft_ms)},
          {"e2e_ms", summary(c.e2e_ms)}};
}

std::string format_class(const std::string& name, const ClassReport& c) {
  std::string deadlines = c.n_with_deadline > 0 ? fmt::format("deadline missed {}/{} ({:.1f}%)", c.n_deadline_missed,
                                                              c.n_with_deadline, 100.0 * c.deadline_miss_rate())
                                                : std::string("no deadlines");
  return fmt::format("  {:<8} {:5} requests, {} completed, {} lost, {}; TTFT p50 {:.0f} ms, p99 {:.0f} ms; "
                     "e2e p99 {:.0f} ms\n",
                     name, c.n_started, c.n_completed, c.n_lost, deadlines, c.ttft_ms.p50, c.ttft_ms.p99, c.e2e_ms.p99);
}

}  // namespace ubatch::loadgen
