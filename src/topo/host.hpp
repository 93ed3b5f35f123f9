#pragma once
// The `host` preset: this machine's tiers, from MPI's shared-memory split (ranks per node)
// and hwloc (packages, and which package each rank is bound to). Link figures are
// estimates, said so in each tier's `source`: nothing is measured.
#include <string>
#include <vector>

#include <mpi.h>

#include "topo/topology.hpp"

namespace strata::topo {

struct HostFacts {
  std::string hostname;
  int ranks_per_node = 1;         // equal on every node, checked by detect_host
  int packages = 1;               // hwloc packages (sockets) on this node
  int cores = 1;                  // hwloc cores on this node
  std::vector<int> rank_package;  // per node-local rank: the package it is bound to, -1 if none or several
};

// Collective over `comm`: every rank must call it. Needs MPI initialised. Throws Error if
// nodes hold different numbers of ranks or a node's ranks are not contiguous in rank order.
HostFacts detect_host(MPI_Comm comm = MPI_COMM_WORLD);

// Tiers `socket` (only when several packages each hold a contiguous, equal block of the
// node's ranks), `node`, `cluster`.
std::vector<Tier> host_tiers(const HostFacts& facts);

}  // namespace strata::topo
