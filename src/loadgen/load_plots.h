// Plots of `ubatch load` results (loadgen/svg.h panels).
#pragma once

#include <vector>

#include "loadgen/load_driver.h"
#include "loadgen/svg.h"

namespace ubatch::loadgen {

// One run: TTFT and end-to-end latency of every completed request against its start time,
// and output tokens/s in 1-second bins of completion time (a request's tokens counted when it
// completes; the last, partial bin divided by its width).
std::vector<SvgPanel> run_panels(const LoadReport& r);

// A --sweep: output tokens/s, and p50/p99 TTFT, against the user count (log x when the
// counts span more than a factor of 8).
std::vector<SvgPanel> sweep_panels(const std::vector<LoadReport>& reports);

}  // namespace ubatch::loadgen
