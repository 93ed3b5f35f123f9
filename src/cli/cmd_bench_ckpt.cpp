// strata bench ckpt: what a checkpoint costs, against memcpy of the same bytes in the same run,
// and its save against a plain write + fsync of those bytes to the same folder (the disk's part).
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "base/aligned.hpp"
#include "base/clock.hpp"
#include "base/error.hpp"
#include "base/fileio.hpp"
#include "cli/command.hpp"
#include "train/checkpoint.hpp"
#include "train/local_engine.hpp"

namespace strata::cli {
namespace {

namespace fs = std::filesystem;

struct CkptArgs {
  std::string model = "small";
  std::string dir;
  int repeats = 3;
  bool json = false;
};

template <class F>
double best_seconds(int repeats, F&& f) {
  double best = 1e300;
  for (int i = 0; i < repeats; ++i) best = std::min(best, seconds_of(f));
  return best;
}

void run_bench_ckpt(const CkptArgs& a) {
  if (a.repeats <= 0) throw Error(fmt::format("bench ckpt: --repeats = {}: must be positive", a.repeats));
  const model::ModelConfig config = model::ModelConfig::preset(a.model);
  train::LocalEngine engine(config, 1, 16, 1);
  const fs::path root = a.dir.empty() ? fs::temp_directory_path() / fmt::format("strata_bench_ckpt_{}", ::getpid())
                                      : fs::path(a.dir);
  if (fs::exists(root / "ckpt")) throw Error(fmt::format("{}: holds a ckpt/ folder already", root.string()));
  const train::StateShard all = engine.state_shards().front();
  const std::size_t n = all.end - all.begin;
  const double bytes = 3.0 * static_cast<double>(n) * sizeof(float);

  // Baseline: copying the three states once.
  AlignedBuffer<float> copy(3 * n);
  const double memcpy_s = best_seconds(a.repeats, [&] {
    std::memcpy(copy.data(), all.master, n * sizeof(float));
    std::memcpy(copy.data() + n, all.exp_avg, n * sizeof(float));
    std::memcpy(copy.data() + 2 * n, all.exp_avg_sq, n * sizeof(float));
  });
  std::uint64_t sink = 0;
  const train::SavedShard whole{{{all.begin, all.end}}, all.master, all.exp_avg, all.exp_avg_sq};
  const double digest_s = best_seconds(a.repeats, [&] { sink += train::state_digest(whole); });
  const double xxh3_s = best_seconds(a.repeats, [&] {
    sink += checksum64(std::as_bytes(std::span(copy.data(), copy.size())));
  });
  // The disk's share of a save: the same bytes in one file, written and fsynced.
  fs::create_directories(root);
  const fs::path raw = root / "raw.bin";
  const double write_s = best_seconds(a.repeats, [&] {
    const int fd = ::open(raw.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) throw Error(fmt::format("{}: cannot create: {}", raw.string(), std::strerror(errno)));
    write_all(fd, copy.data(), copy.size() * sizeof(float), raw);
    const bool synced = ::fsync(fd) == 0;
    ::close(fd);
    if (!synced) throw Error(fmt::format("{}: fsync failed", raw.string()));
  });
  fs::remove(raw);
  train::CheckpointInfo info;
  info.model = config;
  info.engine = engine.describe();
  fs::path saved;
  int step = 0;
  const double save_s = best_seconds(a.repeats, [&] {
    info.step = ++step;
    saved = train::save_checkpoint(engine, root / "ckpt", info);
  });
  const train::Checkpoint ckpt = train::Checkpoint::open(saved);
  const double verify_s = best_seconds(a.repeats, [&] { ckpt.verify(); });
  const double load_s = best_seconds(a.repeats, [&] { train::load_checkpoint(engine, ckpt); });
  std::error_code ec;
  fs::remove_all(a.dir.empty() ? root : root / "ckpt", ec);

  auto gbps = [&](double s) { return bytes / s / 1e9; };
  if (a.json) {
    nlohmann::json j = {{"bench", "ckpt"},        {"model", a.model},         {"state_bytes", bytes},
                        {"memcpy_GBps", gbps(memcpy_s)}, {"digest_GBps", gbps(digest_s)}, {"xxh3_GBps", gbps(xxh3_s)},
                        {"write_fsync_GBps", gbps(write_s)}, {"save_GBps", gbps(save_s)},     {"verify_GBps", gbps(verify_s)}, {"load_GBps", gbps(load_s)},
                        {"sink", sink & 1}};
    fmt::print("{}\n", j.dump(2));
    return;
  }
  fmt::print("bench ckpt: model {} ({:.2f}M parameters), {:.1f} MB of state (master, exp_avg, exp_avg_sq), best of {}\n",
             a.model, static_cast<double>(config.num_params()) / 1e6, bytes / 1e6, a.repeats);
  fmt::print("  memcpy        {:6.2f} GB/s  (baseline)\n", gbps(memcpy_s));
  for (auto [name, s] : {std::pair{"state digest", digest_s}, {"xxh3", xxh3_s}, {"save", save_s},
                         {"verify", verify_s}, {"load", load_s}})
    fmt::print("  {:<13} {:6.2f} GB/s  {:5.2f}x the time of memcpy\n", name, gbps(s), s / memcpy_s);
  fmt::print("  save          {:5.2f}x the time of a plain write + fsync of the same bytes ({:.2f} GB/s)\n",
             save_s / write_s, gbps(write_s));
  fmt::print("  (save: write + fsync + checksum + digest, renamed into place; verify: read + checksum + digest;\n"
             "   load: read + checksum + copy + digest check; the file system cache makes reads cheap)\n");
  if (sink == 42) fmt::print("\n");
}

CommandRegistrar registrar(93, [](CLI::App& app) {
  auto a = std::make_shared<CkptArgs>();
  CLI::App* cmd = bench_group(app)->add_subcommand(
      "ckpt", "Time checkpoint save, verify and load of a model's state against memcpy of the same bytes");
  cmd->add_option("--model", a->model, "model preset: tiny, mini, small, gpt2-124m");
  cmd->add_option("--dir", a->dir, "folder to write in (default: a temporary folder, removed afterwards)");
  cmd->add_option("--repeats", a->repeats, "best of this many runs of each");
  cmd->add_flag("--json", a->json, "print one JSON object");
  cmd->callback([a] { run_bench_ckpt(*a); });
});

}  // namespace
}  // namespace strata::cli
