#include "plan/svg.hpp"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "base/error.hpp"

namespace strata::plan {

namespace {

constexpr double kWidth = 860, kPanel = 420;
constexpr double kLeft = 90, kRight = 210, kTop = 50, kBottom = 70;  // margins inside a panel
// Colour-blind-safe palette (Okabe-Ito), then greys.
constexpr const char* kColors[] = {"#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00",
                                   "#56B4E9", "#000000", "#F0E442", "#777777", "#BBBBBB"};

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

std::string tick_label(double v) {
  if (v == 0) return "0";
  if (std::fabs(v) >= 1e4 || std::fabs(v) < 1e-2) return fmt::format("{:.3g}", v);
  return fmt::format("{:g}", v);
}

}  // namespace

std::vector<double> nice_ticks(double max, int target_count) {
  if (!(max > 0) || !std::isfinite(max)) return {0, 1};
  const double rough = max / std::max(1, target_count);
  const double magnitude = std::pow(10.0, std::floor(std::log10(rough)));
  double step = magnitude;
  for (double m : {1.0, 2.0, 5.0, 10.0}) {
    step = m * magnitude;
    if (step >= rough) break;
  }
  std::vector<double> ticks;
  for (int i = 0; ticks.empty() || ticks.back() < max * (1 - 1e-12); ++i) ticks.push_back(i * step);
  return ticks;
}

std::string svg_document(const std::vector<Chart>& charts, const std::string& caption) {
  const double height = kPanel * static_cast<double>(charts.size()) + 40;
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
    double y_max = 0;
    for (const Series& series : chart.series) {
      if (series.x.size() != series.y.size())
        throw Error(fmt::format("svg: series '{}' has {} x and {} y values", series.label, series.x.size(),
                                series.y.size()));
      for (std::size_t i = 0; i < series.x.size(); ++i) {
        if (chart.log_x && !(series.x[i] > 0))
          throw Error(fmt::format("svg: chart '{}': x = {} on a log axis", chart.title, series.x[i]));
        xs.push_back(series.x[i]);
        if (std::isfinite(series.y[i])) y_max = std::max(y_max, series.y[i]);
      }
    }
    std::sort(xs.begin(), xs.end());
    xs.erase(std::unique(xs.begin(), xs.end()), xs.end());
    if (xs.empty()) xs = {1};
    auto fx = [&](double x) { return chart.log_x ? std::log2(x) : x; };
    const double lo = fx(xs.front()), hi = fx(xs.back());
    const double span = hi > lo ? hi - lo : 1;
    auto px = [&](double x) { return x0 + (fx(x) - (hi > lo ? lo : lo - 0.5)) / span * (x1 - x0); };
    const std::vector<double> yt = nice_ticks(y_max * 1.05, 6);
    const double y_top = yt.back();
    auto py = [&](double y) { return y0 - y / y_top * (y0 - y1); };

    s += fmt::format("<text x=\"{}\" y=\"{}\" font-size=\"16\" font-weight=\"bold\">{}</text>\n", x0, top + 30,
                     escape(chart.title));
    for (double y : yt)
      s += fmt::format(
          "<line x1=\"{0}\" y1=\"{2:.1f}\" x2=\"{1}\" y2=\"{2:.1f}\" stroke=\"#e0e0e0\"/>\n"
          "<text x=\"{3}\" y=\"{4:.1f}\" text-anchor=\"end\">{5}</text>\n",
          x0, x1, py(y), x0 - 8, py(y) + 4, tick_label(y));
    // A grid line at every x in the data; a label where it keeps clear of the previous one.
    double last_label = -1e9;
    for (double x : xs) {
      s += fmt::format("<line x1=\"{0:.1f}\" y1=\"{1}\" x2=\"{0:.1f}\" y2=\"{2}\" stroke=\"#e0e0e0\"/>\n", px(x), y0,
                       y1);
      if (px(x) - last_label < 42) continue;
      last_label = px(x);
      s += fmt::format("<text x=\"{:.1f}\" y=\"{}\" text-anchor=\"middle\">{}</text>\n", px(x), y0 + 20,
                       tick_label(x));
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
      std::string points;
      for (std::size_t i = 0; i < series.x.size(); ++i)
        if (std::isfinite(series.y[i])) points += fmt::format("{:.1f},{:.1f} ", px(series.x[i]), py(series.y[i]));
      s += fmt::format("<polyline fill=\"none\" stroke=\"{}\" stroke-width=\"2\" points=\"{}\"/>\n", color, points);
      for (std::size_t i = 0; i < series.x.size(); ++i) {
        if (!std::isfinite(series.y[i])) continue;
        const bool hollow = i < series.hollow.size() && series.hollow[i];
        s += fmt::format(
            "<circle cx=\"{:.1f}\" cy=\"{:.1f}\" r=\"4\" fill=\"{}\" stroke=\"{}\" stroke-width=\"1.5\"/>\n",
            px(series.x[i]), py(series.y[i]), hollow ? "white" : color, color);
      }
      const double ly = y1 + 8 + 22.0 * static_cast<double>(k);
      s += fmt::format(
          "<line x1=\"{0}\" y1=\"{1:.1f}\" x2=\"{2}\" y2=\"{1:.1f}\" stroke=\"{3}\" stroke-width=\"2\"/>\n"
          "<circle cx=\"{4}\" cy=\"{1:.1f}\" r=\"4\" fill=\"{3}\"/>\n"
          "<text x=\"{5}\" y=\"{6:.1f}\">{7}</text>\n",
          x1 + 15, ly, x1 + 45, color, x1 + 30, x1 + 52, ly + 4, escape(series.label));
    }
  }
  s += fmt::format("<text x=\"{}\" y=\"{}\" font-size=\"12\" fill=\"#444\">{}</text>\n", kLeft, height - 15,
                   escape(caption));
  s += "</svg>\n";
  return s;
}

}  // namespace strata::plan
