#include "comm/runtime/mpi_session.hpp"

#include <cstdlib>

#include "comm/runtime/wait.hpp"

namespace strata::comm {

namespace {

struct TransportDefault {
  const char* name;
  const char* value;
};
// Why each: mpi_session.hpp.
constexpr TransportDefault kTransportDefaults[] = {{"btl_tcp_links", "2"}};

// Sets each default the environment does not already give (Open MPI reads OMPI_MCA_* when
// MPI starts; mpirun passes its --mca settings to the ranks that way).
std::vector<TransportSetting> apply_transport_defaults() {
  std::vector<TransportSetting> applied;
  for (const auto& d : kTransportDefaults) {
    const std::string var = std::string("OMPI_MCA_") + d.name;
    const char* given = std::getenv(var.c_str());
    if (!given) setenv(var.c_str(), d.value, 0);
    applied.push_back({d.name, given ? given : d.value, given != nullptr});
  }
  return applied;
}

}  // namespace

MpiSession::MpiSession(int* argc, char*** argv) {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized) {
    transport_ = apply_transport_defaults();
    int provided = MPI_THREAD_SINGLE;
    MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &provided);
    owns_ = true;
  }
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank_);
  MPI_Comm_size(MPI_COMM_WORLD, &world_size_);
}

MpiSession::~MpiSession() {
  if (!owns_) return;
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) return;
  // MPI_Finalize waits for every rank: one that died or stalls must not hang the others.
  const BlockingCallWatchdog watchdog("MPI_Finalize", "world", MPI_COMM_WORLD);
  MPI_Finalize();
}

MpiSession& mpi_session() {
  static MpiSession session;
  return session;
}

std::vector<int> world_ranks_of(MPI_Comm comm) {
  int d = 0;
  MPI_Comm_size(comm, &d);
  MPI_Group group, world_group;
  MPI_Comm_group(comm, &group);
  MPI_Comm_group(MPI_COMM_WORLD, &world_group);
  std::vector<int> members(d), world(d);
  for (int i = 0; i < d; ++i) members[i] = i;
  MPI_Group_translate_ranks(group, d, members.data(), world_group, world.data());
  MPI_Group_free(&group);
  MPI_Group_free(&world_group);
  return world;
}

}  // namespace strata::comm
