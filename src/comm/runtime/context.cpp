#include "comm/runtime/context.hpp"

#include <chrono>
#include <string>

#include <fmt/format.h>
#include <mpi.h>

#include "base/clock.hpp"
#include "base/error.hpp"

namespace strata::comm {

namespace {
topo::Topology resolved_for_world(topo::Topology t) {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized) throw Error("comm: a communication context needs MPI initialised first (MpiSession)");
  int level = MPI_THREAD_SINGLE;
  MPI_Query_thread(&level);
  if (level != MPI_THREAD_MULTIPLE)
    throw Error(fmt::format("comm: MPI provides thread level {}; the communication thread needs MPI_THREAD_MULTIPLE "
                            "(initialise MPI through MpiSession)",
                            level));
  int world = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  if (!t.resolved()) t.resolve(world);
  if (t.world_size() != world)
    throw Error(fmt::format("comm: topology '{}' is resolved for {} ranks but MPI_COMM_WORLD has {}", t.name(),
                            t.world_size(), world));
  return t;
}
}  // namespace

Context::Context(topo::Topology topology, EmulationOptions emulation)
    : topology_(resolved_for_world(std::move(topology))),
      emulation_(emulation),
      accounting_(topology_.tier_names(), emulation.enabled) {
  if (emulation_.enabled && !(emulation_.scale > 0))
    throw Error(fmt::format("comm: emulation scale {} must be positive", emulation_.scale));
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank_);
}

Work Context::run(std::string_view kind, std::function<void()> fn) {
  if (comm_thread_.on_comm_thread())
    throw Error(fmt::format("comm: {} was started from the communication thread itself", kind));
  return comm_thread_.submit([this, kind = std::string(kind), fn = std::move(fn)] {
    running_kind_ = &kind;
    struct Clear {  // however fn ends
      const std::string*& slot;
      ~Clear() { slot = nullptr; }
    } clear{running_kind_};
    auto t0 = std::chrono::steady_clock::now();
    fn();
    accounting_.record_time(kind, seconds_since(t0));
  });
}

}  // namespace strata::comm
