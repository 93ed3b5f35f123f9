// strata calibrate --from-gemm-bench: a table of measured GEMMs (m,n,k,dtype,tflops) into the
// calibration's compute efficiency, the FLOP-weighted rate over the device's peak.
#include <gtest/gtest.h>

#include "plan/gemm_bench.hpp"
#include "support.hpp"

using namespace strata;
using namespace strata::plan;
using strata::test::error_of;

namespace {

// Published-style cuBLAS bf16 figures for an H100 SXM (989 TFLOP/s dense bf16). The first two
// shapes are of equal FLOPs (2 x 8192^3 = 2 x 16384 x 8192 x 4096), the third 1/512 of them.
constexpr const char* kTable =
    "# cuBLAS bf16 on one H100 SXM\n"
    "m,n,k,dtype,tflops,time_us\n"
    "8192,8192,8192,bf16,600,1833\n"
    "16384, 8192, 4096, bf16, 400, 2749\n"
    "1024,1024,1024,bf16,150,14.3\n";

struct Table {
  test::ScratchDir dir;
  std::filesystem::path path = dir / "gemm.csv";
  explicit Table(std::string_view text) { test::write_bytes(path, text); }
};

DeviceFacts h100() { return gpu_datasheet("h100-sxm").device; }

Calibration from_table(const Table& t) {
  Calibration cal;
  cal.topology = "8xh100-sxm";
  cal.command = "test";
  cal.tiers.resize(1);
  cal.tiers[0].name = "node";
  set_compute_from_gemms(cal, read_gemm_bench(t.path), h100(), t.path);
  return cal;
}

}  // namespace

TEST(GemmBench, EfficiencyIsTheFlopWeightedRateOverThePeak) {
  const Calibration cal = from_table(Table(kTable));
  ASSERT_EQ(cal.gemms.size(), 3u);
  EXPECT_EQ(cal.gemms[1].m, 16384);
  EXPECT_EQ(cal.gemms[1].line, 4);
  // By hand: a unit of FLOPs at 600, one at 400 and 1/512 of one at 150 take
  // (128 + 192 + 1) / 76800 s a unit; (2 + 1/512) units over that is 1025 x 150 / 321 =
  // 478.97 TFLOP/s (the mean of the rates, 383.3, would weigh the small GEMM as the large).
  EXPECT_NEAR(flop_weighted_tflops(cal.gemms), 153750.0 / 321, 1e-9);
  EXPECT_NEAR(cal.compute_efficiency, 153750.0 / 321 / 989, 1e-12);
  EXPECT_EQ(cal.gemm_peak_tflops, 989);
}

TEST(GemmBench, RoundTripsThroughTheCalibrationFile) {
  const Calibration cal = from_table(Table(kTable));
  const std::string text = cal.to_toml();
  const Calibration back = Calibration::from_toml_string(text, "cal.toml");
  EXPECT_DOUBLE_EQ(back.compute_efficiency, cal.compute_efficiency);
  EXPECT_EQ(back.gemm_device, cal.gemm_device);
  ASSERT_EQ(back.gemms.size(), 3u);
  for (std::size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(back.gemms[i].m, cal.gemms[i].m);
    EXPECT_EQ(back.gemms[i].k, cal.gemms[i].k);
    EXPECT_EQ(back.gemms[i].tflops, cal.gemms[i].tflops);
  }
  EXPECT_FALSE(back.compute.has_value());
  // A file edited to an efficiency its GEMMs do not give is refused.
  std::string edited = text;
  edited.replace(edited.find("efficiency = "), 15, "efficiency = 0.9");
  EXPECT_NE(error_of([&] { Calibration::from_toml_string(edited, "cal.toml"); }).find("cal.toml: compute.efficiency = 0.9"),
            std::string::npos);
}

TEST(GemmBench, RefusesAMalformedTableNamingTheLine) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"m,n,dtype,tflops\n1,2,bf16,3\n", "gemm.csv:1: the header has no 'k' column (needs m,n,k,dtype,tflops)"},
      {"m,n,k,dtype,tflops\n1024,1024,1024,bf16,0\n", "gemm.csv:2: tflops = 0: must be positive"},
      {"m,n,k,dtype,tflops\n1024,1024,1024,bf16,-5\n", "gemm.csv:2: tflops = -5: must be positive"},
      {"m,n,k,dtype,tflops\n1024,1024,1024,bf16,fast\n", "gemm.csv:2: tflops 'fast': not a number"},
      {"m,n,k,dtype,tflops\n1024,1024,1024,bf16,500\n\n1024,1024,1024.5,bf16,500\n",
       "gemm.csv:4: k = 1024.5: must be a whole number"},
      {"m,n,k,dtype,tflops\n1024,1024,1024,tf32,300\n", "gemm.csv:2: dtype tf32: the planner prices compute against "
                                                       "the device's dense bf16/fp16 peak"},
      {"m,n,k,dtype,tflops\n1024,1024,1024,int4,300\n", "gemm.csv:2: dtype 'int4': expected bf16 or fp16"},
      {"m,n,k,dtype,tflops\n1024,1024,1024,bf16,300\n2048,2048,2048,fp16,500\n",
       "gemm.csv:3: dtype fp16 where line 2 has bf16: one dtype a table"},
      {"m,n,k,dtype,tflops\n1024,1024,1024,bf16,300\n1024,1024,1024,bf16,310\n",
       "gemm.csv:3: the shape 1024x1024x1024 again (line 2)"},
      {"m,n,k,dtype,tflops\n1024,1024,1024,bf16\n", "gemm.csv:2: 4 columns where the header has 5"},
      {"m,n,k,dtype,tflops\n", "gemm.csv: a header and no GEMMs"},
      {"m,n,k,dtype,tflops\n8192,8192,8192,bf16,1200\n", "gemm.csv:2: tflops = 1200: above the NVIDIA H100 SXM5's "
                                                        "dense bf16 peak of 989 TFLOP/s"},
  };
  for (const auto& [text, expected] : cases) {
    const Table t(text);
    const std::string error = error_of([&] { from_table(t); });
    EXPECT_NE(error.find(expected), std::string::npos) << "got: " << error << "\nexpected: " << expected;
  }
}

TEST(GemmBench, APlanOfAnotherPrecisionOrDeviceIsRefused) {
  const Calibration cal = from_table(Table(kTable));
  EXPECT_NO_THROW(check_gemm_calibration(cal, h100(), Precision::BF16, "--calibration c.toml"));
  EXPECT_NE(error_of([&] { check_gemm_calibration(cal, h100(), Precision::F32, "--calibration c.toml"); })
                .find("--calibration c.toml: its compute efficiency is of bf16 GEMMs; --precision fp32"),
            std::string::npos);
  EXPECT_NE(error_of([&] { check_gemm_calibration(cal, gpu_datasheet("a100-80").device, Precision::BF16, "c"); })
                .find("its GEMMs ran on a NVIDIA H100 SXM5 of 989 TFLOP/s peak"),
            std::string::npos);
}
