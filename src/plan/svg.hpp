#pragma once
// A small SVG line-chart writer for the planner's sweep plots (no dependency).
#include <string>
#include <vector>

namespace strata::plan {

struct Series {
  std::string label;
  std::vector<double> x, y;
  std::vector<bool> hollow;  // per point: drawn as an open marker (e.g. "does not fit")
};

struct Chart {
  std::string title, x_label, y_label;
  bool log_x = false;  // base-2 axis; every x must then be positive
  std::vector<Series> series;
};

// "1, 2, 5 x 10^k" ticks covering [0, max]; at least two.
std::vector<double> nice_ticks(double max, int target_count);

// The charts stacked vertically in one standalone SVG document; `caption` goes under them.
// Text is XML-escaped.
std::string svg_document(const std::vector<Chart>& charts, const std::string& caption);

}  // namespace strata::plan
