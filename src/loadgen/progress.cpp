#include "loadgen/progress.h"

#include <algorithm>
#include <cmath>
#include <fmt/format.h>
#include <unistd.h>

namespace ubatch::loadgen {

std::string render_progress(const Progress& p, int bar_width, const std::string& label) {
  const double f = std::clamp(std::isnan(p.fraction) ? 0.0 : p.fraction, 0.0, 1.0);
  bar_width = std::max(bar_width, 1);
  const int filled = static_cast<int>(std::floor(f * bar_width));
  std::string s;
  if (!label.empty()) {
    s.append(label);
    s.push_back(' ');
  }
  s.push_back('[');
  s.append(static_cast<size_t>(filled), '#');
  s.append(static_cast<size_t>(std::max(0, bar_width - filled)), ' ');
  s.push_back(']');
  const double tps = p.elapsed_s > 0 ? static_cast<double>(p.output_tokens) / p.elapsed_s : 0.0;
  s += fmt::format(" {:3.0f}% {:7.1f} s  done {}  err {}  in flight {}  {:.1f} tok/s", 100.0 * f, p.elapsed_s,
                   p.completed, p.errors, p.in_flight, tps);
  return s;
}

ProgressBar::ProgressBar(bool want, std::FILE* out) : out_(out) { enabled_ = want && out && isatty(fileno(out)); }

void ProgressBar::update(const Progress& p, const std::string& label) {
  if (!enabled_) return;
  std::fprintf(out_, "\r%s\x1b[K", render_progress(p, 30, label).c_str());
  std::fflush(out_);
  drawn_ = true;
}

void ProgressBar::finish() {
  if (!enabled_ || !drawn_) return;
  std::fputc('\n', out_);
  std::fflush(out_);
  drawn_ = false;
}

}  // namespace ubatch::loadgen
