#include "loadgen/load_plots.h"

#include <algorithm>
#include <cmath>

namespace ubatch::loadgen {

std::vector<SvgPanel> run_panels(const LoadReport& r) {
  SvgPanel lat;
  lat.title = "Latency per request";
  lat.x_label = "request start (s)";
  lat.y_label = "ms";
  SvgSeries ttft{"TTFT", {}, {}, false, true, ""}, e2e{"end-to-end", {}, {}, false, true, ""};
  double t_end = 0;
  for (const RequestResult& q : r.requests) {
    if (!q.ok) continue;
    if (q.ttft_ms >= 0) ttft.x.push_back(q.t_start_s), ttft.y.push_back(q.ttft_ms);
    e2e.x.push_back(q.t_start_s), e2e.y.push_back(q.e2e_ms);
    t_end = std::max(t_end, q.t_start_s + q.e2e_ms / 1000.0);
  }
  lat.series = {ttft, e2e};

  SvgPanel tput;
  tput.title = "Output throughput";
  tput.x_label = "time (s)";
  tput.y_label = "output tokens/s";
  const size_t n_bins = static_cast<size_t>(std::ceil(std::max(t_end, 1e-9)));
  std::vector<double> bins(n_bins, 0.0);
  for (const RequestResult& q : r.requests) {
    if (!q.ok) continue;
    const double t = q.t_start_s + q.e2e_ms / 1000.0;
    bins[std::min(n_bins - 1, static_cast<size_t>(std::max(0.0, std::floor(t))))] += static_cast<double>(q.n_output_tokens);
  }
  SvgSeries s{"tokens/s (by completion)", {}, {}, true, true, ""};
  for (size_t i = 0; i < n_bins; ++i) {
    // The last bin may be partial: divide by the part of the second the run covered.
    const double width = std::min(1.0, t_end - static_cast<double>(i));
    s.x.push_back(static_cast<double>(i) + width / 2);
    s.y.push_back(width > 0 ? bins[i] / width : 0.0);
  }
  tput.series = {s};
  return {lat, tput};
}

std::vector<SvgPanel> sweep_panels(const std::vector<LoadReport>& reports) {
  SvgSeries tps{"output tokens/s", {}, {}, true, true, ""};
  SvgSeries p99{"p99 TTFT", {}, {}, true, true, ""}, p50{"p50 TTFT", {}, {}, true, true, ""};
  double umin = 0, umax = 0;
  for (const LoadReport& r : reports) {
    const double u = r.users;
    umin = tps.x.empty() ? u : std::min(umin, u);
    umax = tps.x.empty() ? u : std::max(umax, u);
    tps.x.push_back(u), tps.y.push_back(r.output_tps);
    if (r.ttft_ms.n > 0) {
      p99.x.push_back(u), p99.y.push_back(r.ttft_ms.p99);
      p50.x.push_back(u), p50.y.push_back(r.ttft_ms.p50);
    }
  }
  const bool log_x = umin > 0 && umax / umin > 8;
  SvgPanel a{"Throughput against users", "concurrent users", "output tokens/s", log_x, true, {tps}};
  SvgPanel b{"Time to first token against users", "concurrent users", "TTFT (ms)", log_x, true, {p99, p50}};
  return {a, b};
}

}  // namespace ubatch::loadgen
