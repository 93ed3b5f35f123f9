#pragma once
// Each subcommand lives in its own cmd_*.cpp and registers itself here at start-up, so a
// new command is one new file.
#include <functional>
#include <string>

#include <CLI/CLI.hpp>

namespace strata::cli {

// setup adds a subcommand to the app and sets its callback. Sub-commands that need MPI
// (every command that may run under mpirun) call mpi_session() inside their callback.
using CommandSetup = std::function<void(CLI::App& app)>;

struct CommandRegistrar {
  CommandRegistrar(int order, CommandSetup setup);
};

// The `strata bench ...` group, shared by the benchmark commands of several files: returns
// the existing "bench" subcommand or creates it.
inline CLI::App* bench_group(CLI::App& app) {
  try {
    return app.get_subcommand("bench");
  } catch (const CLI::OptionNotFound&) {
    CLI::App* bench = app.add_subcommand("bench", "Benchmarks");
    bench->require_subcommand(1);
    return bench;
  }
}

}  // namespace strata::cli
