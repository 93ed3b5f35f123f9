// strata: train transformer language models data-parallel, each state sharded over its tier.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <mpi.h>

#include "base/error.hpp"
#include "cli/command.hpp"
#include "cli/parse.hpp"

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
// Under mpirun every rank reads the same command line and refuses it alike: rank 0 speaks for all.
bool speaks_for_job() {
  const char* rank = std::getenv("OMPI_COMM_WORLD_RANK");
  return !rank || std::atoi(rank) == 0;
}

// A refusal of what the user typed: status 2, like every other refusal.
int refuse(const std::string& message) {
  std::fflush(stdout);
  if (speaks_for_job()) fmt::print(stderr, "strata: error: {}\n", message);
  return 2;
}

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
  strata::cli::accept_count_forms(app);
  if (auto refusal = strata::cli::command_name_error(app, argc, argv)) return refuse(*refusal);
  try {
    app.parse(argc, argv);
  } catch (const CLI::Success& e) {
    return app.exit(e);  // --help, --version
  } catch (const CLI::ParseError& e) {
    return refuse(strata::cli::parse_error_message(app, e, argc, argv));
  } catch (const strata::AgreedError& e) {
    return refuse(e.what());  // thrown alike on every rank of an MPI job
  } catch (const std::exception& e) {  // Error, or a library's own (filesystem, allocation)
    std::fflush(stdout);
    fmt::print(stderr, "strata: error: {}\n", e.what());
    abort_job_if_others_wait();
    return 2;
  }
  return 0;
}
