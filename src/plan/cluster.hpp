#pragma once
// A GPU cluster of the common shape in one line (`strata plan --cluster`): nodes of `gpus`
// GPUs of a named kind joined by their GPU link (NVLink, Infinity Fabric), and `nics` NICs a
// node onto the network, e.g. "nodes=16,gpus=8,gpu=h100-sxm,nvlink=450,nics=8x400", or the
// same keys in a TOML file's [cluster] table. It gives the tiers a topology preset of that
// shape has (topo::datasheet_tier: the same latencies and efficiency) and the device's
// datasheet figures; anything else stays a topology TOML of [[tiers]] (docs/topology.md).
#include <string>
#include <string_view>
#include <vector>

#include "plan/device.hpp"
#include "topo/topology.hpp"

namespace strata::plan {

struct ClusterSpec {
  std::string origin;      // the line or the file, for messages and the topology's name
  int nodes = 0;           // 0: not given (--nodes then)
  int gpus = 0;            // packages a node
  std::string gpu;
  double link_GBps = 0;    // nvlink=: 0, the datasheet's
  int nics = 0;
  double nic_Gbps = 0;     // each NIC's line rate, Gb/s

  // "key=value,..." or a TOML file holding a [cluster] table of the same keys; throws Error
  // naming the key (and the file) that is missing, unknown or bad.
  static ClusterSpec parse(std::string_view line_or_file);
  topo::Topology topology() const;  // outermost tier "cluster", its size left to --nodes / nodes=
  DeviceFacts device() const;
};

}  // namespace strata::plan
