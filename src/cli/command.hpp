#pragma once
// Each subcommand lives in its own cmd_*.cpp and registers itself here at start-up, so a
// new command is one new file.
#include <functional>

#include <CLI/CLI.hpp>

namespace strata::cli {

// setup adds a subcommand to the app and sets its callback. Sub-commands that need MPI
// (every command that may run under mpirun) call mpi_session() inside their callback.
using CommandSetup = std::function<void(CLI::App& app)>;

struct CommandRegistrar {
  CommandRegistrar(int order, CommandSetup setup);
};

// The `strata bench` group, created by whichever command file asks first; each benchmark
// adds itself as a subcommand of it (bench step, bench collectives, bench quant, ...).
CLI::App* bench_group(CLI::App& app);

}  // namespace strata::cli
