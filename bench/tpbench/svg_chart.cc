// SVG charts and text helpers for tpbench reports (see svg_chart.h).
#include "bench/tpbench/svg_chart.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "coordinator/api/html_escape.h"

namespace tpserve::bench {

// A number with fixed decimals, or "-" when absent (negative or not finite).
std::string Fmt(double v, int decimals) {
  if (!std::isfinite(v) || v < 0) return "-";
  return absl::StrFormat("%.*f", decimals, v);
}

// Plain printable ASCII in one line: the report must stay ASCII whatever a server said.
std::string Ascii(const std::string& s, size_t max_chars) {
  std::string out;
  for (char c : s) {
    const unsigned char u = static_cast<unsigned char>(c);
    if (c == '\n' || c == '\r' || c == '\t') {
      out += ' ';
    } else if (u < 0x20 || u > 0x7e) {
      out += '?';
    } else {
      out += c;
    }
    if (out.size() >= max_chars) {
      out += "...";
      break;
    }
  }
  return out;
}

std::string MarkdownCell(const std::string& s) {
  std::string out;
  for (char c : Ascii(s)) {
    if (c == '|') out += '\\';
    out += c;
  }
  return out.empty() ? "-" : out;
}

std::string MarkdownTable(const std::vector<std::string>& header, const std::vector<std::vector<std::string>>& rows,
                          bool numeric) {
  std::string out = absl::StrCat("| ", absl::StrJoin(header, " | "), " |\n|");
  for (size_t i = 0; i < header.size(); ++i) out += (numeric && i > 0) ? "---:|" : "---|";
  out += "\n";
  for (const auto& row : rows) {
    std::vector<std::string> cells;
    for (const std::string& c : row) cells.push_back(MarkdownCell(c));
    absl::StrAppend(&out, "| ", absl::StrJoin(cells, " | "), " |\n");
  }
  return out;
}

namespace {

constexpr const char* kColors[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd",
                                   "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"};
constexpr int kNumColors = sizeof(kColors) / sizeof(kColors[0]);

std::string Xml(const std::string& s) { return HtmlEscape(Ascii(s, 80)); }

std::string Px(double v) { return absl::StrFormat("%.1f", v); }

// Tick step of 1, 2 or 5 x 10^k giving about five intervals up to `max`.
double NiceStep(double max) {
  if (!(max > 0)) return 1;
  const double raw = max / 5;
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  const double f = raw / mag;
  return (f <= 1 ? 1 : f <= 2 ? 2 : f <= 5 ? 5 : 10) * mag;
}

std::string TickLabel(double v, double step) {
  const int decimals = step >= 1 ? 0 : static_cast<int>(std::ceil(-std::log10(step) - 1e-9));
  return absl::StrFormat("%.*f", decimals, v);
}



// Plot area geometry shared by both chart kinds.
constexpr double kLeft = 80, kTop = 40, kPlotHeight = 260;

std::string SvgOpen(double width, double height, const std::string& title) {
  return absl::StrCat(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"", Px(width), "\" height=\"", Px(height),
      "\" viewBox=\"0 0 ", Px(width), " ", Px(height),
      "\" font-family=\"sans-serif\" font-size=\"12\">\n<rect width=\"100%\" height=\"100%\" "
      "fill=\"white\"/>\n<text x=\"",
      Px(width / 2), "\" y=\"22\" text-anchor=\"middle\" font-size=\"15\">", Xml(title),
      "</text>\n");
}

// The y axis from 0 with gridlines and tick labels; returns the scaled maximum.
double DrawYAxis(std::string* svg, double max_y, double plot_width, const std::string& label) {
  const double step = NiceStep(max_y);
  const double top = std::max(step, std::ceil(max_y / step - 1e-9) * step);
  const double bottom = kTop + kPlotHeight;
  for (int i = 0; i * step <= top + step * 1e-9; ++i) {
    const double v = i * step;
    const double y = bottom - v / top * kPlotHeight;
    absl::StrAppend(svg, "<line x1=\"", Px(kLeft), "\" y1=\"", Px(y), "\" x2=\"",
                    Px(kLeft + plot_width), "\" y2=\"", Px(y),
                    "\" stroke=\"#dddddd\"/>\n<text x=\"", Px(kLeft - 6), "\" y=\"", Px(y + 4),
                    "\" text-anchor=\"end\">", TickLabel(v, step), "</text>\n");
  }
  absl::StrAppend(svg, "<line x1=\"", Px(kLeft), "\" y1=\"", Px(kTop), "\" x2=\"", Px(kLeft),
                  "\" y2=\"", Px(bottom), "\" stroke=\"black\"/>\n<line x1=\"", Px(kLeft),
                  "\" y1=\"", Px(bottom), "\" x2=\"", Px(kLeft + plot_width), "\" y2=\"",
                  Px(bottom), "\" stroke=\"black\"/>\n");
  const double mid = kTop + kPlotHeight / 2;
  absl::StrAppend(svg, "<text x=\"18\" y=\"", Px(mid),
                  "\" text-anchor=\"middle\" transform=\"rotate(-90 18 ", Px(mid), ")\">",
                  Xml(label), "</text>\n");
  return top;
}

}  // namespace

std::string RenderLineChart(const LineChart& c) {
  constexpr double kPlotWidth = 560, kLegendRow = 18;
  const double width = kLeft + kPlotWidth + 30;
  const double legend_top = kTop + kPlotHeight + 58;
  const double height = legend_top + kLegendRow * static_cast<double>(c.series.size()) + 10;

  double min_x = 0, max_x = 0, max_y = 0;
  bool any = false;
  for (const Series& s : c.series) {
    for (const auto& [x, y] : s.points) {
      min_x = any ? std::min(min_x, x) : x;
      max_x = any ? std::max(max_x, x) : x;
      max_y = std::max(max_y, y);
      any = true;
    }
  }
  // x range: whole powers of two (log2 axis) or a nice range from 0 (linear axis).
  double x_lo = 0, x_hi = 1, x_step = 1;
  if (c.log2_x) {
    x_lo = std::floor(std::log2(std::max(min_x, 1.0)));
    x_hi = std::max(x_lo + 1, std::ceil(std::log2(std::max(max_x, 1.0))));
  } else {
    x_step = NiceStep(max_x);
    x_hi = std::max(x_step, std::ceil(max_x / x_step - 1e-9) * x_step);
  }
  // Inset so that markers at the ends of the range do not sit on the axes.
  constexpr double kInset = 16;
  auto sx = [&](double x) {
    const double u = c.log2_x ? std::log2(std::max(x, 1e-12)) : x;
    return kLeft + kInset + (u - x_lo) / (x_hi - x_lo) * (kPlotWidth - 2 * kInset);
  };

  std::string svg = SvgOpen(width, height, c.title);
  const double y_top = DrawYAxis(&svg, max_y, kPlotWidth, c.y_label);
  const double bottom = kTop + kPlotHeight;
  auto sy = [&](double y) { return bottom - y / y_top * kPlotHeight; };

  const int n_ticks =
      c.log2_x ? static_cast<int>(x_hi - x_lo) : static_cast<int>(std::lround(x_hi / x_step));
  for (int i = 0; i <= n_ticks; ++i) {
    const double u = c.log2_x ? x_lo + i : i * x_step;
    const double x = c.log2_x ? sx(std::exp2(u)) : sx(u);
    const std::string label =
        c.log2_x ? absl::StrFormat("%.0f", std::exp2(u)) : TickLabel(u, x_step);
    absl::StrAppend(&svg, "<line x1=\"", Px(x), "\" y1=\"", Px(bottom), "\" x2=\"", Px(x),
                    "\" y2=\"", Px(bottom + 5), "\" stroke=\"black\"/>\n<text x=\"", Px(x),
                    "\" y=\"", Px(bottom + 18), "\" text-anchor=\"middle\">", label, "</text>\n");
  }
  absl::StrAppend(&svg, "<text x=\"", Px(kLeft + kPlotWidth / 2), "\" y=\"", Px(bottom + 38),
                  "\" text-anchor=\"middle\">", Xml(c.x_label), "</text>\n");

  for (size_t i = 0; i < c.series.size(); ++i) {
    const Series& s = c.series[i];
    const char* color = kColors[s.color % kNumColors];
    std::vector<std::string> coords;
    for (const auto& [x, y] : s.points) coords.push_back(absl::StrCat(Px(sx(x)), ",", Px(sy(y))));
    absl::StrAppend(&svg, "<polyline fill=\"none\" stroke=\"", color,
                    "\" stroke-width=\"2\" points=\"", absl::StrJoin(coords, " "), "\"/>\n");
    for (const auto& [x, y] : s.points) {
      absl::StrAppend(&svg, "<circle cx=\"", Px(sx(x)), "\" cy=\"", Px(sy(y)),
                      "\" r=\"3.5\" fill=\"", color, "\"/>\n");
    }
    const double ly = legend_top + kLegendRow * static_cast<double>(i);
    absl::StrAppend(&svg, "<line x1=\"", Px(kLeft), "\" y1=\"", Px(ly - 4), "\" x2=\"",
                    Px(kLeft + 24), "\" y2=\"", Px(ly - 4), "\" stroke=\"", color,
                    "\" stroke-width=\"2\"/>\n<circle cx=\"", Px(kLeft + 12), "\" cy=\"",
                    Px(ly - 4), "\" r=\"3.5\" fill=\"", color, "\"/>\n<text x=\"", Px(kLeft + 32),
                    "\" y=\"", Px(ly), "\">", Xml(s.name), "</text>\n");
  }
  svg += "</svg>\n";
  return svg;
}

namespace {

// Splits `text` at spaces into lines of about `width` characters; at most 4 lines, the
// last one truncated.
std::vector<std::string> WrapWords(const std::string& text, size_t width) {
  std::vector<std::string> lines(1);
  for (absl::string_view word : absl::StrSplit(text, ' ', absl::SkipEmpty())) {
    if (!lines.back().empty() && lines.back().size() + 1 + word.size() > width) {
      lines.emplace_back();
    }
    if (!lines.back().empty()) lines.back() += ' ';
    absl::StrAppend(&lines.back(), word);
  }
  if (lines.size() > 4) {
    lines.resize(4);
    lines.back() += " ...";
  }
  return lines;
}


}  // namespace

std::string RenderBarChart(const std::string& title, const std::string& y_label,
                           const std::vector<Bar>& bars) {
  // Labels wrap at about kLabelChars (11px text is ~6.5px a character) into up to 4 lines.
  constexpr double kSlot = 150;
  constexpr size_t kLabelChars = 20;
  const double plot_width = std::max(400.0, kSlot * static_cast<double>(bars.size()));
  const double width = kLeft + plot_width + 30;
  const double height = kTop + kPlotHeight + 80;
  double max_y = 0;
  for (const Bar& b : bars) max_y = std::max(max_y, b.value);

  std::string svg = SvgOpen(width, height, title);
  const double y_top = DrawYAxis(&svg, max_y, plot_width, y_label);
  const double bottom = kTop + kPlotHeight;
  const double slot = plot_width / static_cast<double>(std::max<size_t>(bars.size(), 1));
  for (size_t i = 0; i < bars.size(); ++i) {
    const Bar& b = bars[i];
    const double h = std::max(0.0, b.value) / y_top * kPlotHeight;
    const double cx = kLeft + slot * (static_cast<double>(i) + 0.5);
    const double bw = slot * 0.6;
    absl::StrAppend(&svg, "<rect x=\"", Px(cx - bw / 2), "\" y=\"", Px(bottom - h), "\" width=\"",
                    Px(bw), "\" height=\"", Px(h), "\" fill=\"", kColors[b.color % kNumColors],
                    "\"/>\n<text x=\"", Px(cx), "\" y=\"", Px(bottom - h - 5),
                    "\" text-anchor=\"middle\">", Fmt(b.value, 1), "</text>\n");
    const std::vector<std::string> lines = WrapWords(b.label, kLabelChars);
    for (size_t k = 0; k < lines.size(); ++k) {
      absl::StrAppend(&svg, "<text x=\"", Px(cx), "\" y=\"",
                      Px(bottom + 18 + 14 * static_cast<double>(k)),
                      "\" text-anchor=\"middle\" font-size=\"11\">", Xml(lines[k]), "</text>\n");
    }
  }
  svg += "</svg>\n";
  return svg;
}

}  // namespace tpserve::bench
