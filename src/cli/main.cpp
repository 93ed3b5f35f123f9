// strata: train transformer language models data-parallel, each state sharded over its tier.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include <fmt/format.h>
#include <mpi.h>

#include "base/error.hpp"
#include "cli/command.hpp"

namespace strata::cli {

namespace {
std::vector<std::pair<int, CommandSetup>>& registry() {
  static std::vector<std::pair<int, CommandSetup>> r;
  return r;
}
}  // namespace

CommandRegistrar::CommandRegistrar(int order, CommandSetup setup) {
  registry().emplace_back(order, std::move(setup));
}

CLI::App* bench_group(CLI::App& app) {
  try {
    return app.get_subcommand("bench");
  } catch (const CLI::OptionNotFound&) {
    CLI::App* bench = app.add_subcommand("bench", "Measure strata's speed");
    bench->require_subcommand(1);
    return bench;
  }
}

}  // namespace strata::cli

namespace {
// A rank that fails alone must not leave the others waiting in their next collective (until
// the collective timeout): in a job of several ranks it takes them all down at once.
void abort_job_if_others_wait() {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (!initialized || finalized) return;
  int world = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  if (world > 1) {
    std::fflush(nullptr);
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
}
}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"strata: data-parallel transformer training with each state sharded over its own tier"};
  app.set_version_flag("--version", std::string("strata ") + STRATA_VERSION);
  app.require_subcommand(1);
  auto& reg = strata::cli::registry();
  std::stable_sort(reg.begin(), reg.end(), [](auto& a, auto& b) { return a.first < b.first; });
  for (auto& [order, setup] : reg) setup(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const strata::AgreedError& e) {
    // Thrown alike on every rank of an MPI job: rank 0 speaks for all.
    const char* rank = std::getenv("OMPI_COMM_WORLD_RANK");
    std::fflush(stdout);
    if (!rank || std::atoi(rank) == 0) fmt::print(stderr, "strata: error: {}\n", e.what());
    return 2;
  } catch (const std::exception& e) {  // Error, or a library's own (filesystem, allocation)
    std::fflush(stdout);
    fmt::print(stderr, "strata: error: {}\n", e.what());
    abort_job_if_others_wait();
    return 2;
  }
  return 0;
}
