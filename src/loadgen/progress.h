// A one-line progress bar for `ubatch load`, redrawn in place on stderr ("\r" + erase to end
// of line). Enabled only when stderr is a terminal and the user did not ask for --quiet.
#pragma once

#include <cstdio>
#include <string>

#include "loadgen/load_driver.h"

namespace ubatch::loadgen {

// "[#########           ]  45%   13.5 s  done 120  err 0  in flight 4  52.3 tok/s"
// (bar_width cells; label, when non-empty, goes first).
std::string render_progress(const Progress& p, int bar_width, const std::string& label = "");

class ProgressBar {
 public:
  // enabled = want && isatty(fileno(out)).
  ProgressBar(bool want, std::FILE* out = stderr);
  bool enabled() const { return enabled_; }
  void update(const Progress& p, const std::string& label = "");
  // Ends the line (if anything was drawn).
  void finish();

 private:
  bool enabled_ = false;
  bool drawn_ = false;
  std::FILE* out_;
};

}  // namespace ubatch::loadgen
