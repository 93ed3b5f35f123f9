#pragma once
// A cluster's own measurements in: the output of NVIDIA's nccl-tests (all_gather_perf,
// reduce_scatter_perf, all_reduce_perf, alltoall_perf; rccl-tests prints the same) read into
// a calibration's collective curves (plan/calibration.hpp), for `strata calibrate
// --from-nccl-tests LOG...` (docs/calibration.md "From nccl-tests").
//
// A log's header lists every rank ("#  Rank  0 Group  0 Pid 123 on HOST device 0 [..] NAME"):
// its ranks, hosts and device. Its table gives, a size, the out-of-place and in-place time,
// algorithm and bus bandwidth. nccl-tests defines bus bandwidth as the bytes a rank sends in a
// ring over the time (size x (n-1)/n, x 2 for all-reduce; nccl-tests doc/PERFORMANCE.md), which
// is the x axis of strata's curves: a one-host log becomes the node tier's curve at those bytes,
// a log over several hosts the cluster tier's, at the bytes each rank of a host sends across
// (the host's NICs carry its ring's bytes for all its ranks at once, as a flat ring is priced).
#include <filesystem>
#include <string>
#include <vector>

#include "plan/calibration.hpp"

namespace strata::plan {

struct NcclTestsRow {
  int line = 0;
  double size_bytes = 0;  // nccl-tests' size column
  double seconds = 0;     // the mean of the out-of-place and in-place times
  double bus_GBps = 0;    // the mean of their busbw columns, as printed
};

struct NcclTestsLog {
  std::string path;
  Collective collective = Collective::AllGather;
  int ranks = 0, hosts = 0;
  std::string device;  // the first rank's device name
  std::vector<NcclTestsRow> rows;

  int ranks_per_host() const { return ranks / hosts; }
  // The factor of size a rank sends in the ring (nccl-tests' bus bandwidth factor).
  double bus_factor() const;
};

// Reads one log; refuses (naming the file, and the line where there is one) a malformed line,
// a test other than the four, a row whose bus bandwidth the header's ranks do not explain,
// wrong results, repeated sizes, fewer than two sizes, uneven ranks per host.
NcclTestsLog read_nccl_tests_log(const std::filesystem::path& path);

// A calibration of the tiers named (innermost first, at least two: the topology's; a tier
// without a log keeps the topology's figures): one-host logs on the tier inside the outermost
// (the node), several-host logs on the outermost (the cluster). Refuses two logs of one
// collective on one tier.
Calibration calibration_from_nccl_tests(const std::vector<NcclTestsLog>& logs, const std::vector<std::string>& tiers,
                                        std::string topology, std::string command);

}  // namespace strata::plan
