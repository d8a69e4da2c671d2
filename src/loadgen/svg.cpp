#include "loadgen/svg.h"

#include <algorithm>
#include <cmath>
#include <fmt/format.h>
#include <fstream>
#include <limits>

namespace ubatch::loadgen {

std::string xml_escape(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&apos;"; break;
      default: out += c;
    }
  }
  return out;
}

Status write_text_file(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) return Status::error(fmt::format("{}: cannot open for writing", path));
  out << text;
  out.close();
  if (!out) return Status::error(fmt::format("{}: write failed", path));
  return Status::ok();
}

std::vector<double> nice_ticks(double lo, double hi, int target) {
  if (!std::isfinite(lo) || !std::isfinite(hi)) return {0.0, 1.0};
  if (lo > hi) std::swap(lo, hi);
  if (hi - lo < 1e-12 * std::max(1.0, std::fabs(hi))) {
    lo -= 0.5 * std::max(1.0, std::fabs(lo) * 0.1) ;
    hi += 0.5 * std::max(1.0, std::fabs(hi) * 0.1);
  }
  target = std::max(target, 1);
  const double raw = (hi - lo) / target;
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  const double r = raw / mag;
  const double step = (r <= 1.0 ? 1.0 : r <= 2.0 ? 2.0 : r <= 5.0 ? 5.0 : 10.0) * mag;
  const double first = std::floor(lo / step + 1e-9) * step;
  std::vector<double> t;
  for (int i = 0; i < 1000; ++i) {
    const double v = first + i * step;
    t.push_back(std::fabs(v) < step * 1e-9 ? 0.0 : v);
    if (v >= hi - step * 1e-9) break;
  }
  return t;
}

std::vector<double> log_ticks(double lo, double hi) {
  if (!(lo > 0) || !std::isfinite(lo) || !std::isfinite(hi)) return {1.0, 10.0};
  if (lo > hi) std::swap(lo, hi);
  std::vector<double> t;
  const int e0 = static_cast<int>(std::floor(std::log10(lo) + 1e-9));
  const int e1 = static_cast<int>(std::ceil(std::log10(hi) - 1e-9));
  const double mult[] = {1.0, 2.0, 5.0};
  for (int e = e0; e <= e1; ++e)
    for (double m : mult) {
      const double v = m * std::pow(10.0, e);
      t.push_back(v);
    }
  // Keep the span from the largest tick <= lo to the smallest tick >= hi.
  size_t a = 0, b = t.size() - 1;
  while (a + 1 < t.size() && t[a + 1] <= lo * (1 + 1e-9)) ++a;
  while (b > a + 1 && t[b - 1] >= hi * (1 - 1e-9)) --b;
  return std::vector<double>(t.begin() + static_cast<std::ptrdiff_t>(a), t.begin() + static_cast<std::ptrdiff_t>(b) + 1);
}

namespace {

constexpr const char* kPalette[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b"};

std::string num(double v) {
  if (v == 0) return "0";
  const double a = std::fabs(v);
  if (a >= 1e6 || a < 1e-3) return fmt::format("{:.3g}", v);
  std::string s = fmt::format("{:.3f}", v);
  while (!s.empty() && s.back() == '0') s.pop_back();
  if (!s.empty() && s.back() == '.') s.pop_back();
  return s;
}

std::string coord(double v) { return fmt::format("{:.1f}", v); }

void render_panel(std::string& out, const SvgPanel& p, double top, double width, double height) {
  const double ml = 72, mr = 16, mt = 28, mb = 44;
  const double x0 = ml, x1 = width - mr, y0 = top + mt, y1 = top + height - mb;
  // Data range.
  double xmin = std::numeric_limits<double>::infinity(), xmax = -xmin, ymin = xmin, ymax = -xmin;
  size_t n_points = 0;
  auto usable = [&](double x, double y) { return std::isfinite(x) && std::isfinite(y) && (!p.log_x || x > 0); };
  for (const SvgSeries& s : p.series)
    for (size_t i = 0; i < std::min(s.x.size(), s.y.size()); ++i)
      if (usable(s.x[i], s.y[i])) {
        xmin = std::min(xmin, s.x[i]), xmax = std::max(xmax, s.x[i]);
        ymin = std::min(ymin, s.y[i]), ymax = std::max(ymax, s.y[i]);
        ++n_points;
      }
  if (n_points == 0) xmin = p.log_x ? 1 : 0, xmax = p.log_x ? 10 : 1, ymin = 0, ymax = 1;
  if (p.y_from_zero && ymin >= 0) ymin = 0;
  const std::vector<double> xt = p.log_x ? log_ticks(xmin, xmax) : nice_ticks(xmin, xmax, 6);
  const std::vector<double> yt = nice_ticks(ymin, ymax, 5);
  const double xa = xt.front(), xb = xt.back(), ya = yt.front(), yb = yt.back();
  auto px = [&](double x) {
    const double f = p.log_x ? (std::log10(x) - std::log10(xa)) / (std::log10(xb) - std::log10(xa)) : (x - xa) / (xb - xa);
    return x0 + f * (x1 - x0);
  };
  auto py = [&](double y) { return y1 - (y - ya) / (yb - ya) * (y1 - y0); };

  out += fmt::format("<g class=\"panel\">\n");
  if (!p.title.empty())
    out += fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"middle\" font-size=\"14\" font-weight=\"bold\">{}</text>\n",
                       coord((x0 + x1) / 2), coord(top + 18), xml_escape(p.title));
  // Grid and ticks.
  for (double v : yt) {
    const double y = py(v);
    out += fmt::format("<line x1=\"{}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" stroke=\"#e0e0e0\"/>\n", coord(x0), coord(y), coord(x1), coord(y));
    out += fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"end\" font-size=\"11\">{}</text>\n", coord(x0 - 6),
                       coord(y + 4), num(v));
  }
  for (double v : xt) {
    const double x = px(v);
    out += fmt::format("<line x1=\"{}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" stroke=\"#e0e0e0\"/>\n", coord(x), coord(y0), coord(x), coord(y1));
    out += fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"middle\" font-size=\"11\">{}</text>\n", coord(x),
                       coord(y1 + 16), num(v));
  }
  out += fmt::format("<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"none\" stroke=\"#333\"/>\n", coord(x0),
                     coord(y0), coord(x1 - x0), coord(y1 - y0));
  if (!p.x_label.empty())
    out += fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"middle\" font-size=\"12\">{}</text>\n", coord((x0 + x1) / 2),
                       coord(y1 + 36), xml_escape(p.x_label));
  if (!p.y_label.empty()) {
    const double cx = 16, cy = (y0 + y1) / 2;
    out += fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"middle\" font-size=\"12\" transform=\"rotate(-90 {} {})\">{}</text>\n",
                       coord(cx), coord(cy), coord(cx), coord(cy), xml_escape(p.y_label));
  }
  if (n_points == 0)
    out += fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"middle\" font-size=\"12\" fill=\"#888\">no data</text>\n",
                       coord((x0 + x1) / 2), coord((y0 + y1) / 2));
  // Legend box (top right, white background over the data), sized by the longest name
  // (about 6.5 px per character at 11 px).
  size_t longest = 0, n_named = 0;
  for (const SvgSeries& s : p.series)
    if (!s.name.empty()) longest = std::max(longest, s.name.size()), ++n_named;
  const double legend_w = 30 + 6.5 * static_cast<double>(longest);
  const double legend_x = x1 - legend_w - 6;
  if (n_named > 0)
    out += fmt::format("<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"white\" fill-opacity=\"0.85\" stroke=\"#ccc\"/>\n",
                       coord(legend_x), coord(y0 + 4), coord(legend_w), coord(8 + 16 * static_cast<double>(p.series.size())));
  // Series.
  for (size_t si = 0; si < p.series.size(); ++si) {
    const SvgSeries& s = p.series[si];
    const std::string color = xml_escape(s.color.empty() ? kPalette[si % 6] : s.color);
    std::string pts;
    std::string markers;
    size_t n = 0;
    for (size_t i = 0; i < std::min(s.x.size(), s.y.size()); ++i) {
      if (!usable(s.x[i], s.y[i])) continue;
      const std::string cx = coord(px(s.x[i])), cy = coord(py(s.y[i]));
      pts += (n++ ? " " : "") + cx + "," + cy;
      if (s.markers) markers += fmt::format("<circle cx=\"{}\" cy=\"{}\" r=\"{}\" fill=\"{}\"/>\n", cx, cy, s.lines ? 3 : 2, color);
    }
    out += fmt::format("<g class=\"series\" data-name=\"{}\">\n", xml_escape(s.name));
    if (s.lines && n > 1)
      out += fmt::format("<polyline fill=\"none\" stroke=\"{}\" stroke-width=\"2\" points=\"{}\"/>\n", color, pts);
    out += markers;
    out += "</g>\n";
  }
  // Legend entries, drawn last so they stay on top.
  for (size_t si = 0; si < p.series.size(); ++si) {
    const SvgSeries& s = p.series[si];
    if (s.name.empty()) continue;
    const std::string color = xml_escape(s.color.empty() ? kPalette[si % 6] : s.color);
    const double ly = y0 + 18 + 16 * static_cast<double>(si);
    out += fmt::format("<rect x=\"{}\" y=\"{}\" width=\"10\" height=\"10\" fill=\"{}\"/>\n", coord(legend_x + 8),
                       coord(ly - 9), color);
    out += fmt::format("<text x=\"{}\" y=\"{}\" font-size=\"11\">{}</text>\n", coord(legend_x + 23), coord(ly),
                       xml_escape(s.name));
  }
  out += "</g>\n";
}

}  // namespace

std::string render_svg(const std::vector<SvgPanel>& panels, const SvgOptions& o) {
  const double title_h = o.title.empty() ? 0 : 30;
  const double width = std::max(o.width, 200), ph = std::max(o.panel_height, 120);
  const double height = title_h + ph * static_cast<double>(std::max<size_t>(panels.size(), 1));
  std::string out = fmt::format(
      "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
      "<svg xmlns=\"http://www.w3.org/2000/svg\" version=\"1.1\" width=\"{}\" height=\"{}\" viewBox=\"0 0 {} {}\" "
      "font-family=\"sans-serif\">\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n",
      coord(width), coord(height), coord(width), coord(height));
  if (!o.title.empty())
    out += fmt::format("<text x=\"{}\" y=\"20\" text-anchor=\"middle\" font-size=\"16\" font-weight=\"bold\">{}</text>\n",
                       coord(width / 2), xml_escape(o.title));
  for (size_t i = 0; i < panels.size(); ++i) render_panel(out, panels[i], title_h + ph * static_cast<double>(i), width, ph);
  out += "</svg>\n";
  return out;
}

}  // namespace ubatch::loadgen
