#include "plan/gemm_bench.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <optional>
#include <sstream>
#include <string>

#include <fmt/format.h>

#include "base/error.hpp"
#include "base/text.hpp"
#include "base/fileio.hpp"

namespace strata::plan {

namespace {

constexpr std::array<std::string_view, 5> kColumns = {"m", "n", "k", "dtype", "tflops"};

std::string trimmed(std::string_view s) {
  const auto first = s.find_first_not_of(" \t\r");
  if (first == std::string_view::npos) return {};
  return std::string(s.substr(first, s.find_last_not_of(" \t\r") - first + 1));
}

std::vector<std::string> cells(const std::string& line) {
  std::vector<std::string> out;
  for (std::string_view cell : split_list(line)) out.push_back(trimmed(cell));
  return out;
}

// Where each of kColumns is in the header's cells; refuses a missing or repeated column.
std::array<std::size_t, 5> column_positions(const std::vector<std::string>& header, const std::string& where) {
  std::array<std::size_t, 5> at{};
  for (std::size_t c = 0; c < kColumns.size(); ++c) {
    const auto found = std::find(header.begin(), header.end(), kColumns[c]);
    if (found == header.end())
      throw Error(fmt::format("{}: the header has no '{}' column (needs m,n,k,dtype,tflops)", where, kColumns[c]));
    if (std::find(found + 1, header.end(), kColumns[c]) != header.end())
      throw Error(fmt::format("{}: the header names '{}' twice", where, kColumns[c]));
    at[c] = static_cast<std::size_t>(found - header.begin());
  }
  return at;
}

double positive_cell(const std::string& cell, std::string_view column, bool integer, const std::string& where) {
  double v = 0;
  if (!parse_whole(cell, v) || !std::isfinite(v))
    throw Error(fmt::format("{}: {} '{}': not a number", where, column, cell));
  if (!(v > 0)) throw Error(fmt::format("{}: {} = {}: must be positive", where, column, cell));
  if (integer && v != std::floor(v)) throw Error(fmt::format("{}: {} = {}: must be a whole number", where, column, cell));
  return v;
}

GemmPoint read_row(const std::vector<std::string>& row, const std::array<std::size_t, 5>& at, const std::string& where) {
  GemmPoint g;
  g.m = positive_cell(row[at[0]], "m", true, where);
  g.n = positive_cell(row[at[1]], "n", true, where);
  g.k = positive_cell(row[at[2]], "k", true, where);
  g.dtype = row[at[3]];
  if (g.dtype == "fp32" || g.dtype == "tf32" || g.dtype == "fp8" || g.dtype == "int8")
    throw Error(fmt::format("{}: dtype {}: the planner prices compute against the device's dense bf16/fp16 peak, "
                            "which {} GEMMs do not run at; give bf16 or fp16 GEMMs",
                            where, g.dtype, g.dtype));
  if (g.dtype != "bf16" && g.dtype != "fp16")
    throw Error(fmt::format("{}: dtype '{}': expected bf16 or fp16", where, g.dtype));
  g.tflops = positive_cell(row[at[4]], "tflops", false, where);
  return g;
}

}  // namespace

std::vector<GemmPoint> read_gemm_bench(const std::filesystem::path& path) {
  std::istringstream in(read_file_text(path));
  std::optional<std::array<std::size_t, 5>> at;
  std::size_t columns = 0;
  std::vector<GemmPoint> gemms;
  int number = 0;
  for (std::string line; std::getline(in, line);) {
    ++number;
    const std::string text = trimmed(line);
    if (text.empty() || text.front() == '#') continue;
    const std::string where = fmt::format("{}:{}", path.string(), number);
    const std::vector<std::string> row = cells(text);
    if (!at) {
      at = column_positions(row, where);
      columns = row.size();
      continue;
    }
    if (row.size() != columns)
      throw Error(fmt::format("{}: {} columns where the header has {}", where, row.size(), columns));
    GemmPoint g = read_row(row, *at, where);
    g.line = number;
    for (const GemmPoint& seen : gemms) {
      if (seen.dtype != g.dtype)
        throw Error(fmt::format("{}: dtype {} where line {} has {}: one dtype a table", where, g.dtype, seen.line,
                                seen.dtype));
      if (seen.m == g.m && seen.n == g.n && seen.k == g.k)
        throw Error(fmt::format("{}: the shape {:g}x{:g}x{:g} again (line {})", where, g.m, g.n, g.k, seen.line));
    }
    gemms.push_back(std::move(g));
  }
  if (!at) throw Error(fmt::format("{}: empty (a header m,n,k,dtype,tflops and a row a GEMM)", path.string()));
  if (gemms.empty()) throw Error(fmt::format("{}: a header and no GEMMs", path.string()));
  return gemms;
}

void set_compute_from_gemms(Calibration& cal, std::vector<GemmPoint> gemms, const DeviceFacts& device,
                            const std::filesystem::path& path) {
  for (const GemmPoint& g : gemms)
    if (g.tflops > device.peak_tflops)
      throw Error(fmt::format("{}:{}: tflops = {:g}: above the {}'s dense bf16 peak of {:g} TFLOP/s", path.string(),
                              g.line, g.tflops, device.name, device.peak_tflops));
  cal.compute_efficiency = flop_weighted_tflops(gemms) / device.peak_tflops;
  cal.gemms = std::move(gemms);
  cal.gemm_device = device.name;
  cal.gemm_peak_tflops = device.peak_tflops;
}

void check_gemm_calibration(const Calibration& cal, const DeviceFacts& device, Precision precision,
                            std::string_view origin) {
  if (cal.gemms.empty()) return;
  if (precision != Precision::BF16)
    throw Error(fmt::format("{}: its compute efficiency is of {} GEMMs; --precision {} computes at another rate "
                            "(give --compute-efficiency, or --precision bf16)",
                            origin, cal.gemms.front().dtype, precision_name(precision)));
  if (std::abs(device.peak_tflops - cal.gemm_peak_tflops) > 1e-9 * cal.gemm_peak_tflops)
    throw Error(fmt::format("{}: its GEMMs ran on a {} of {:g} TFLOP/s peak; this plan's device ({}) has {:g} "
                            "(calibrate for this device, or give --compute-efficiency)",
                            origin, cal.gemm_device, cal.gemm_peak_tflops, device.name, device.peak_tflops));
}

}  // namespace strata::plan
