#include "topo/host.hpp"

#include <hwloc.h>

#include <fmt/format.h>

#include "base/error.hpp"
#include "base/plural.hpp"

namespace strata::topo {

namespace {

// Which package this process is bound to: its logical index, or -1 when it is not bound
// inside exactly one package (unbound, bound across packages, or the query failed).
int bound_package(hwloc_topology_t topology) {
  hwloc_bitmap_t set = hwloc_bitmap_alloc();
  int package = -1;
  if (hwloc_get_cpubind(topology, set, HWLOC_CPUBIND_PROCESS) == 0 && !hwloc_bitmap_iszero(set)) {
    int n = hwloc_get_nbobjs_by_type(topology, HWLOC_OBJ_PACKAGE);
    for (int i = 0; i < n; ++i) {
      hwloc_obj_t obj = hwloc_get_obj_by_type(topology, HWLOC_OBJ_PACKAGE, i);
      if (hwloc_bitmap_isincluded(set, obj->cpuset)) package = static_cast<int>(obj->logical_index);
    }
  }
  hwloc_bitmap_free(set);
  return package;
}

// Ranks per package when the node's ranks fill several packages in contiguous equal
// blocks (rank order = package order); 0 when they do not, and no socket tier is made.
int socket_block(const HostFacts& f) {
  const int n = f.ranks_per_node;
  if (f.packages < 2 || static_cast<int>(f.rank_package.size()) != n) return 0;
  for (int p : f.rank_package)
    if (p < 0) return 0;
  int block = 1;
  while (block < n && f.rank_package[block] == f.rank_package[0]) ++block;
  if (block == n || n % block != 0) return 0;
  for (int start = 0; start < n; start += block) {
    for (int i = start; i < start + block; ++i)
      if (f.rank_package[i] != f.rank_package[start]) return 0;
    for (int earlier = 0; earlier < start; earlier += block)
      if (f.rank_package[earlier] == f.rank_package[start]) return 0;
  }
  return block;
}

}  // namespace

HostFacts detect_host(MPI_Comm comm) {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized)
    throw Error(
        "preset 'host': needs MPI initialised (strata commands start it; test mains hold an MpiSession)");
  int rank = 0;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm node;
  MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &node);
  int node_size = 0;
  MPI_Comm_size(node, &node_size);
  std::vector<int> node_ranks(node_size);
  MPI_Allgather(&rank, 1, MPI_INT, node_ranks.data(), 1, MPI_INT, node);
  bool contiguous = node_ranks[0] % node_size == 0;
  for (int i = 0; i < node_size; ++i) contiguous = contiguous && node_ranks[i] == node_ranks[0] + i;

  HostFacts facts;
  hwloc_topology_t topology;
  hwloc_topology_init(&topology);
  hwloc_topology_load(topology);
  facts.packages = std::max(1, hwloc_get_nbobjs_by_type(topology, HWLOC_OBJ_PACKAGE));
  facts.cores = std::max(1, hwloc_get_nbobjs_by_type(topology, HWLOC_OBJ_CORE));
  int package = bound_package(topology);
  hwloc_topology_destroy(topology);
  facts.rank_package.resize(node_size);
  MPI_Allgather(&package, 1, MPI_INT, facts.rank_package.data(), 1, MPI_INT, node);
  MPI_Comm_free(&node);

  char name[MPI_MAX_PROCESSOR_NAME];
  int name_len = 0;
  MPI_Get_processor_name(name, &name_len);
  facts.hostname.assign(name, name_len);
  facts.ranks_per_node = node_size;

  // Every rank learns the same verdict, so all of them throw or none does.
  int checks[3] = {node_size, -node_size, contiguous ? 1 : 0};
  MPI_Allreduce(MPI_IN_PLACE, checks, 3, MPI_INT, MPI_MIN, comm);
  if (checks[0] != -checks[1])
    throw Error(fmt::format("preset 'host': nodes hold {} to {} ranks; every node must hold the same number",
                            checks[0], -checks[1]));
  if (!checks[2])
    throw Error(
        fmt::format("preset 'host': the ranks sharing a node are not contiguous in rank order ({} holds "
                    "ranks {}); place ranks by slot (mpirun --map-by slot)",
                    facts.hostname, fmt::join(node_ranks, ",")));
  return facts;
}

std::vector<Tier> host_tiers(const HostFacts& f) {
  const std::string seen = fmt::format("detected on {}: {}, {}, {} a node", f.hostname,
                                       count_of(f.packages, "package"), count_of(f.cores, "core"),
                                       count_of(f.ranks_per_node, "rank"));
  std::vector<Tier> tiers;
  if (int block = socket_block(f)) {
    tiers.push_back({"socket", block, 20, 0.5, 1.0,
                     "estimate, not measured: shared-memory copies between cores of one package; " + seen});
    tiers.push_back({"node", f.ranks_per_node / block, 10, 1.0, 1.0,
                     "estimate, not measured: shared-memory copies between packages; " + seen});
  } else {
    tiers.push_back({"node", f.ranks_per_node, 20, 0.5, 1.0,
                     "estimate, not measured: shared-memory copies inside one node; " + seen});
  }
  tiers.push_back({"cluster", 0, 12.5, 5, 1.0, "estimate, not probed: a 100 Gb/s network between nodes"});
  return tiers;
}

}  // namespace strata::topo
