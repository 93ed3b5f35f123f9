#pragma once
// A cluster's own measurements into a calibration, no MPI run: nccl-tests logs into the
// collective curves of the tiers, a GEMM benchmark's table into the compute efficiency
// (docs/calibration.md).
#include <string>
#include <vector>

#include "plan/calibration.hpp"
#include "plan/nccl_tests.hpp"

namespace strata::calibrate {

struct ImportOptions {
  std::vector<std::string> nccl_tests;  // log files
  std::string gemm_bench;               // a CSV of measured GEMMs
  std::string topology, cluster;        // whose tier names and device the file is of
};

struct Imported {
  plan::Calibration calibration;
  std::vector<plan::NcclTestsLog> logs;
  std::vector<std::string> tiers;  // the names the curves went to
};

// Checked as `strata plan --calibration` reads it; Error names the flag and the problem.
Imported import_measurements(const ImportOptions& o);

}  // namespace strata::calibrate
