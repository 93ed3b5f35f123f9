#pragma once
// A small SVG line-chart writer for the planner's sweep plots (no dependency).
#include <string>
#include <string_view>
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

// A generous estimate of the width of a line of text in Helvetica/Arial (0.6 em a character,
// above their average even in bold): what the layout keeps inside the picture.
double estimated_text_width(std::string_view text, double font_size);
// WCAG 2 contrast ratio of a #RRGGBB colour against white (1 to 21).
double contrast_on_white(const std::string& hex_color);

// "1, 2, 5 x 10^k" ticks covering [min, max], the first a multiple of the step at or below min;
// at least two.
std::vector<double> nice_ticks(double min, double max, int target_count);
// One axis's tick labels in one notation: plain decimals with as many places as the step needs;
// one SI suffix for the whole axis (k, M, G, T) where the step is at least a tenth of it; values
// below 0.01 in one scientific form: never "5000" beside "1e+04".
std::vector<std::string> tick_labels(const std::vector<double>& ticks);

// The charts stacked vertically in one standalone SVG document; `caption` goes under them.
// Titles and the caption wrap to the picture's width; a series drawn along the same points as
// an earlier one is dashed and noted in its legend entry and the caption. Text is XML-escaped.
std::string svg_document(const std::vector<Chart>& charts, const std::string& caption);

}  // namespace strata::plan
