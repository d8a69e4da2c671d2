// A small hand-written SVG chart writer for the plots of `ubatch load`: one or more panels
// stacked vertically, each with axes, "nice" ticks (1, 2, 5 × 10^k), optional log-scale x,
// a legend, and series drawn as lines and/or point markers. Output is a standalone SVG 1.1
// document (UTF-8); all text is XML-escaped. Non-finite points (and x <= 0 on a log axis)
// are skipped.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace ubatch::loadgen {

struct SvgSeries {
  std::string name;
  std::vector<double> x, y;  // same length (extra elements of the longer one are ignored)
  bool lines = true;         // connect points in order
  bool markers = true;       // a circle at each point
  std::string color;         // "" : from the palette by index
};

struct SvgPanel {
  std::string title, x_label, y_label;
  bool log_x = false;
  bool y_from_zero = true;   // include 0 in the y range when all y >= 0
  std::vector<SvgSeries> series;
};

struct SvgOptions {
  std::string title;         // document title above the panels ("" : none)
  int width = 760;
  int panel_height = 320;
};

std::string render_svg(const std::vector<SvgPanel>& panels, const SvgOptions& options = {});

// Tick values covering [lo, hi] with about `target` steps of 1, 2 or 5 × 10^k; the first
// tick is <= lo and the last >= hi. lo == hi gets a unit-wide range around it.
std::vector<double> nice_ticks(double lo, double hi, int target = 5);
// Ticks 1, 2, 5 × 10^k within [lo, hi] (lo > 0) for a log axis, at least lo and hi rounded
// outwards to such values.
std::vector<double> log_ticks(double lo, double hi);

// & < > " ' → entities.
std::string xml_escape(std::string_view text);

// Writes text to path (replacing it). Errors name the path.
Status write_text_file(const std::string& path, const std::string& text);

}  // namespace ubatch::loadgen
