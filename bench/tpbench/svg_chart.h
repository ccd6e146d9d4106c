// Hand-drawn SVG charts for tpbench reports (no plotting tools on benchmark hosts):
// line charts with an optional log2 x axis, and labelled bar charts; plus the ASCII text
// helpers the Markdown report shares. Tested by tests/tpbench_core_test.cc.
#ifndef TPSERVE_BENCH_TPBENCH_SVG_CHART_H_
#define TPSERVE_BENCH_TPBENCH_SVG_CHART_H_

#include <cstddef>
#include <string>
#include <utility>
#include <vector>

namespace tpserve::bench {

struct Series {
  std::string name;
  int color = 0;
  std::vector<std::pair<double, double>> points;  // (x, y), x ascending
};

struct LineChart {
  std::string title, x_label, y_label;
  bool log2_x = false;
  std::vector<Series> series;
};

struct Bar {
  std::string label;
  double value = 0;
  int color = 0;
};

// A standalone SVG document; same input, same bytes.
std::string RenderLineChart(const LineChart& chart);
std::string RenderBarChart(const std::string& title, const std::string& y_label, const std::vector<Bar>& bars);

// A number with fixed decimals, or "-" when absent (negative or not finite).
std::string Fmt(double v, int decimals);
// Plain printable ASCII in one line, cut after `max_chars`: reports stay ASCII whatever a
// server said.
std::string Ascii(const std::string& s, size_t max_chars = 200);
// A Markdown table cell: ASCII, pipes escaped, never empty.
std::string MarkdownCell(const std::string& s);
// A Markdown table; `numeric` right-aligns every column but the first.
std::string MarkdownTable(const std::vector<std::string>& header, const std::vector<std::vector<std::string>>& rows,
                          bool numeric);

}  // namespace tpserve::bench

#endif  // TPSERVE_BENCH_TPBENCH_SVG_CHART_H_
