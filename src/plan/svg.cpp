#include "plan/svg.hpp"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "base/error.hpp"

namespace strata::plan {

namespace {

constexpr double kWidth = 860, kPanel = 420;
constexpr double kLeft = 90, kRight = 210, kTop = 50, kBottom = 70;  // margins inside a panel
constexpr double kTextX = 20;                                        // titles and captions start here
constexpr double kTitleSize = 16, kCaptionSize = 12, kLineGap = 1.25;
// Distinct hues, each at least 3:1 against white (WCAG's contrast for graphics): Okabe-Ito's
// blue, vermillion and green, then darker purple, amber, indigo and wine, black, grey, teal.
constexpr const char* kColors[] = {"#0072B2", "#D55E00", "#009E73", "#AA4499", "#996600",
                                   "#000000", "#332288", "#882255", "#666666", "#009988"};

std::string escape(const std::string& text) {
  std::string out;
  for (char c : text) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      default: out += c;
    }
  }
  return out;
}

// Greedy word wrap to lines no wider than `width` at `font_size`; a '\n' always breaks.
std::vector<std::string> wrap(const std::string& text, double font_size, double width) {
  std::vector<std::string> lines;
  std::size_t start = 0;
  for (;;) {
    std::size_t stop = text.find('\n', start);
    if (stop == std::string::npos) stop = text.size();
    std::string line;
    std::size_t pos = start;
    while (pos < stop) {
      std::size_t end = std::min(text.find(' ', pos), stop);
      const std::string word = text.substr(pos, end - pos);
      if (word.empty()) {  // a run of spaces
        pos = end + 1;
        continue;
      }
      const std::string longer = line.empty() ? word : line + " " + word;
      if (!line.empty() && estimated_text_width(longer, font_size) > width) {
        lines.push_back(line);
        line = word;
      } else {
        line = longer;
      }
      pos = end + 1;
    }
    lines.push_back(line);
    if (stop == text.size()) return lines;
    start = stop + 1;
  }
}

// The first earlier series drawn along exactly the same points, or -1.
int same_line_as(const std::vector<Series>& series, std::size_t k) {
  for (std::size_t j = 0; j < k; ++j)
    if (series[j].x == series[k].x && series[j].y == series[k].y) return static_cast<int>(j);
  return -1;
}

}  // namespace

double estimated_text_width(std::string_view text, double font_size) {
  return 0.6 * font_size * static_cast<double>(text.size());
}

double contrast_on_white(const std::string& hex_color) {
  if (hex_color.size() != 7 || hex_color[0] != '#') throw Error(fmt::format("svg: colour '{}' is not #RRGGBB", hex_color));
  double channel[3];
  for (int i = 0; i < 3; ++i) {
    const double c = std::stoi(hex_color.substr(1 + 2 * i, 2), nullptr, 16) / 255.0;
    channel[i] = c <= 0.03928 ? c / 12.92 : std::pow((c + 0.055) / 1.055, 2.4);
  }
  const double luminance = 0.2126 * channel[0] + 0.7152 * channel[1] + 0.0722 * channel[2];
  return 1.05 / (luminance + 0.05);
}

std::vector<double> nice_ticks(double min, double max, int target_count) {
  if (!std::isfinite(min) || !std::isfinite(max) || !(max > min)) {
    if (std::isfinite(max) && max > 0) min = 0;  // one value: the axis from 0 to it
    else return {0, 1};
  }
  const double rough = (max - min) / std::max(1, target_count);
  const double magnitude = std::pow(10.0, std::floor(std::log10(rough)));
  double step = magnitude;
  for (double m : {1.0, 2.0, 5.0, 10.0}) {
    step = m * magnitude;
    if (step >= rough) break;
  }
  const double first = std::floor(min / step * (1 + 1e-12)) * step;
  std::vector<double> ticks;
  for (int i = 0; ticks.size() < 2 || ticks.back() < max * (1 - 1e-12); ++i) {
    const double t = first + i * step;
    ticks.push_back(std::fabs(t) < step * 1e-9 ? 0.0 : t);
  }
  return ticks;
}

std::vector<std::string> tick_labels(const std::vector<double>& ticks) {
  double largest = 0, step = 0;
  for (std::size_t i = 0; i < ticks.size(); ++i) {
    largest = std::max(largest, std::fabs(ticks[i]));
    const double gap = i > 0 ? std::fabs(ticks[i] - ticks[i - 1]) : 0;
    if (gap > 0 && (step == 0 || gap < step)) step = gap;
  }
  if (step == 0) step = largest > 0 ? largest : 1;
  std::vector<std::string> labels;
  if (largest > 0 && largest < 1e-2) {
    for (double t : ticks) labels.push_back(t == 0 ? "0" : fmt::format("{:.1e}", t));
    return labels;
  }
  static constexpr std::pair<double, const char*> kSuffixes[] = {{1e12, "T"}, {1e9, "G"}, {1e6, "M"}, {1e3, "k"}};
  double unit = 1;
  const char* suffix = "";
  for (const auto& [u, sfx] : kSuffixes)
    if (largest >= u && step >= u / 10) {  // a suffix where the step is not lost below it: not "0.85k"
      unit = u, suffix = sfx;
      break;
    }
  const int places = std::max(0, static_cast<int>(-std::floor(std::log10(step / unit) + 1e-9)));
  for (double t : ticks)
    labels.push_back(t == 0 ? "0" : fmt::format("{:.{}f}{}", t / unit, places, suffix));
  return labels;
}

std::string svg_document(const std::vector<Chart>& charts, const std::string& caption) {
  // Lines that coincide hide each other: the later one is drawn dashed and named in its
  // legend entry and in the caption.
  std::vector<std::string> coincide;
  for (std::size_t c = 0; c < charts.size(); ++c) {
    std::vector<std::string> pairs;
    for (std::size_t k = 0; k < charts[c].series.size(); ++k)
      if (const int j = same_line_as(charts[c].series, k); j >= 0)
        pairs.push_back(fmt::format("{} = {}", charts[c].series[k].label, charts[c].series[j].label));
    if (!pairs.empty()) coincide.push_back(fmt::format("{} (chart {})", fmt::join(pairs, ", "), c + 1));
  }
  std::string full_caption = caption;
  if (!coincide.empty())
    full_caption += fmt::format("; dashed lines lie on an earlier one: {}", fmt::join(coincide, "; "));
  const std::vector<std::string> caption_lines = wrap(full_caption, kCaptionSize, kWidth - 2 * kTextX);
  const double caption_line = kCaptionSize * kLineGap;
  const double height =
      kPanel * static_cast<double>(charts.size()) + 20 + caption_line * static_cast<double>(caption_lines.size());
  std::string s = fmt::format(
      "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{0}\" height=\"{1}\" viewBox=\"0 0 {0} {1}\" "
      "font-family=\"Helvetica, Arial, sans-serif\" font-size=\"13\">\n"
      "<rect width=\"{0}\" height=\"{1}\" fill=\"white\"/>\n",
      kWidth, height);
  for (std::size_t c = 0; c < charts.size(); ++c) {
    const Chart& chart = charts[c];
    const double top = kPanel * static_cast<double>(c);
    const double x0 = kLeft, x1 = kWidth - kRight, y0 = top + kPanel - kBottom, y1 = top + kTop;

    std::vector<double> xs;
    double y_min = INFINITY, y_max = -INFINITY;
    for (const Series& series : chart.series) {
      if (series.x.size() != series.y.size())
        throw Error(fmt::format("svg: series '{}' has {} x and {} y values", series.label, series.x.size(),
                                series.y.size()));
      for (std::size_t i = 0; i < series.x.size(); ++i) {
        if (chart.log_x && !(series.x[i] > 0))
          throw Error(fmt::format("svg: chart '{}': x = {} on a log axis", chart.title, series.x[i]));
        xs.push_back(series.x[i]);
        if (std::isfinite(series.y[i])) y_min = std::min(y_min, series.y[i]), y_max = std::max(y_max, series.y[i]);
      }
    }
    std::sort(xs.begin(), xs.end());
    xs.erase(std::unique(xs.begin(), xs.end()), xs.end());
    if (xs.empty()) xs = {1};
    auto fx = [&](double x) { return chart.log_x ? std::log2(x) : x; };
    const double lo = fx(xs.front()), hi = fx(xs.back());
    const double span = hi > lo ? hi - lo : 1;
    auto px = [&](double x) { return x0 + (fx(x) - (hi > lo ? lo : lo - 0.5)) / span * (x1 - x0); };
    // The y axis spans the data with a margin, from 0 only where the data come near it: a
    // difference between lines is not squeezed against the top of the panel.
    const double margin = 0.05 * (y_max > y_min ? y_max - y_min : std::fabs(y_max));
    const double y_from = y_min >= 0 && y_min - margin < 0.25 * y_max ? 0 : y_min - margin;
    const std::vector<double> yt = nice_ticks(y_from, y_max + margin, 6);
    const std::vector<std::string> y_labels = tick_labels(yt);
    const double y_bottom = yt.front(), y_top = yt.back();
    auto py = [&](double y) { return y0 - (y - y_bottom) / (y_top - y_bottom) * (y0 - y1); };

    // Wrapped to the width, at most two lines above the plot (kTop); a smaller font if need be.
    double title_size = kTitleSize;
    std::vector<std::string> title_lines = wrap(chart.title, title_size, kWidth - 2 * kTextX);
    while (title_lines.size() > 2 && title_size > 8)
      title_lines = wrap(chart.title, title_size -= 1, kWidth - 2 * kTextX);
    for (std::size_t i = 0; i < title_lines.size(); ++i)
      s += fmt::format("<text x=\"{}\" y=\"{:.1f}\" font-size=\"{}\" font-weight=\"bold\">{}</text>\n", kTextX,
                       top + (title_lines.size() == 1 ? 30 : 22 + title_size * kLineGap * static_cast<double>(i)),
                       title_size, escape(title_lines[i]));
    for (std::size_t i = 0; i < yt.size(); ++i)
      s += fmt::format(
          "<line x1=\"{0}\" y1=\"{2:.1f}\" x2=\"{1}\" y2=\"{2:.1f}\" stroke=\"#e0e0e0\"/>\n"
          "<text x=\"{3}\" y=\"{4:.1f}\" text-anchor=\"end\">{5}</text>\n",
          x0, x1, py(yt[i]), x0 - 8, py(yt[i]) + 4, y_labels[i]);
    // A grid line at every x in the data; a label where it keeps clear of the previous one.
    const std::vector<std::string> x_labels = tick_labels(xs);
    double last_label = -1e9;
    for (std::size_t i = 0; i < xs.size(); ++i) {
      const double x = xs[i];
      s += fmt::format("<line x1=\"{0:.1f}\" y1=\"{1}\" x2=\"{0:.1f}\" y2=\"{2}\" stroke=\"#e0e0e0\"/>\n", px(x), y0,
                       y1);
      if (px(x) - last_label < 42) continue;
      last_label = px(x);
      s += fmt::format("<text x=\"{:.1f}\" y=\"{}\" text-anchor=\"middle\">{}</text>\n", px(x), y0 + 20,
                       x_labels[i]);
    }
    s += fmt::format("<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"none\" stroke=\"#333\"/>\n", x0, y1,
                     x1 - x0, y0 - y1);
    s += fmt::format("<text x=\"{:.1f}\" y=\"{}\" text-anchor=\"middle\">{}</text>\n", (x0 + x1) / 2, y0 + 45,
                     escape(chart.x_label + (chart.log_x ? " (log scale)" : "")));
    s += fmt::format(
        "<text x=\"{0}\" y=\"{1:.1f}\" text-anchor=\"middle\" transform=\"rotate(-90 {0} {1:.1f})\">{2}</text>\n",
        x0 - 60, (y0 + y1) / 2, escape(chart.y_label));

    for (std::size_t k = 0; k < chart.series.size(); ++k) {
      const Series& series = chart.series[k];
      const char* color = kColors[k % std::size(kColors)];
      const int same = same_line_as(chart.series, k);
      const std::string dash = same >= 0 ? " stroke-dasharray=\"7 5\"" : "";
      std::string points;
      for (std::size_t i = 0; i < series.x.size(); ++i)
        if (std::isfinite(series.y[i])) points += fmt::format("{:.1f},{:.1f} ", px(series.x[i]), py(series.y[i]));
      s += fmt::format("<polyline fill=\"none\" stroke=\"{}\" stroke-width=\"2\"{} points=\"{}\"/>\n", color, dash,
                       points);
      for (std::size_t i = 0; i < series.x.size(); ++i) {
        if (!std::isfinite(series.y[i])) continue;
        const bool hollow = i < series.hollow.size() && series.hollow[i];
        s += fmt::format(
            "<circle cx=\"{:.1f}\" cy=\"{:.1f}\" r=\"4\" fill=\"{}\" stroke=\"{}\" stroke-width=\"1.5\"/>\n",
            px(series.x[i]), py(series.y[i]), hollow ? "white" : color, color);
      }
      const double ly = y1 + 8 + 22.0 * static_cast<double>(k);
      const std::string label =
          same >= 0 ? fmt::format("{} (= {})", series.label, chart.series[same].label) : series.label;
      s += fmt::format(
          "<line x1=\"{0}\" y1=\"{1:.1f}\" x2=\"{2}\" y2=\"{1:.1f}\" stroke=\"{3}\" stroke-width=\"2\"{8}/>\n"
          "<circle cx=\"{4}\" cy=\"{1:.1f}\" r=\"4\" fill=\"{3}\"/>\n"
          "<text x=\"{5}\" y=\"{6:.1f}\">{7}</text>\n",
          x1 + 15, ly, x1 + 45, color, x1 + 30, x1 + 52, ly + 4, escape(label), dash);
    }
  }
  const double caption_top = kPanel * static_cast<double>(charts.size()) + 10;
  for (std::size_t i = 0; i < caption_lines.size(); ++i)
    s += fmt::format("<text x=\"{}\" y=\"{:.1f}\" font-size=\"{}\" fill=\"#444\">{}</text>\n", kTextX,
                     caption_top + caption_line * static_cast<double>(i + 1), kCaptionSize, escape(caption_lines[i]));
  s += "</svg>\n";
  return s;
}

}  // namespace strata::plan
