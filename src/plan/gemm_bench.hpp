#pragma once
// A cluster's own matmul measurements in: a table of measured TFLOP/s by GEMM shape, read into
// the calibration's compute efficiency (plan/calibration.hpp), for `strata calibrate
// --from-gemm-bench FILE` (docs/calibration.md "From a GEMM benchmark").
//
// The table is CSV with a header naming the columns m,n,k,dtype,tflops (any order; other columns
// are ignored, as a benchmark's own output has them): an m x k by k x n product, its dtype
// (bf16 or fp16, the precision the device's peak is stated in) and the TFLOP/s it reached.
// Lines starting with # are comments.
#include <filesystem>
#include <vector>

#include "plan/calibration.hpp"
#include "plan/cost_model.hpp"
#include "plan/device.hpp"

namespace strata::plan {

// Reads the table; refuses (naming the file and the line) a missing column, a row of another
// column count, a non-positive or non-integer size, a non-positive figure, a dtype other than
// bf16/fp16 (fp32, tf32 and fp8 run at other peaks than the device's dense bf16 one), a table of
// two dtypes, a shape given twice, a table without rows.
std::vector<GemmPoint> read_gemm_bench(const std::filesystem::path& path);

// Sets the calibration's compute efficiency to the GEMMs' FLOP-weighted rate over the device's
// peak and keeps the GEMMs beside it; refuses a GEMM faster than the peak, naming its line.
void set_compute_from_gemms(Calibration& cal, std::vector<GemmPoint> gemms, const DeviceFacts& device,
                            const std::filesystem::path& path);

// A plan priced with a calibration whose efficiency came from GEMMs: refuses a precision other
// than the GEMMs' (16-bit) and a device of another peak than the one the rate was divided by.
void check_gemm_calibration(const Calibration& cal, const DeviceFacts& device, Precision precision,
                            std::string_view origin);

}  // namespace strata::plan
