#pragma once
// What `strata train` runs. Every setting has one key ("train.batch"), used by the TOML
// config file ([train] batch = 4), by its command-line flag (--batch) and in error messages,
// so a value can be given either way and refusals name it the same way.
#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <variant>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "comm/runtime/flight.hpp"
#include "comm/runtime/pieces.hpp"
#include "comm/runtime/wait.hpp"
#include "model/config.hpp"
#include "optim/adamw.hpp"
#include "parallel/options.hpp"

namespace strata::train {

struct TrainConfig {
  std::string model_name = "tiny";  // the preset the model started from
  model::ModelConfig model = model::ModelConfig::preset("tiny");

  int batch = 4;        // sequences per micro-batch, per rank
  int seq = 0;          // tokens per sequence; 0 = model.seq_len
  int grad_accum = 1;   // micro-batches per optimizer step
  std::int64_t steps = 100;
  std::uint64_t seed = 1337;
  int threads = 0;      // OpenMP threads; 0 = OpenMP's default (OMP_NUM_THREADS or all cores)
  std::string device = "cpu";  // compute device (device/device.hpp names the backends)
  std::string precision = "fp32";  // what the matmuls read: fp32, or bf16 copies (fp32 accumulation)

  float lr = 6e-4f;     // peak learning rate, after warm-up
  float min_lr = 6e-5f; // end of the cosine decay
  std::int64_t warmup = 0;
  optim::AdamWConfig adamw;

  std::string train_data, val_data;  // llm.c .bin token files; val_data may be empty
  std::int64_t val_every = 0;        // validate every N steps (0: only at the end)
  int val_batches = 8;               // micro-batches per validation, per rank
  std::int64_t save_every = 0;       // checkpoint every N steps (0: only at the end)
  int keep_last = 0;                 // checkpoints kept in out_dir/ckpt (0: all)
  int max_skipped_steps = 10;        // non-finite steps in a row that stop the run
  std::string recompute = "none";     // activations in backward: none (kept), full (recomputed)
  std::string loss_scale = "auto";   // auto (dynamic when gradients cross fp16), dynamic, off
  float initial_loss_scale = 65536;  // dynamic scaling starts here (a power of two)
  std::int64_t loss_scale_window = 1000;  // good steps in a row before the scale doubles
  std::int64_t log_every = 10;       // plain progress lines when not on a terminal
  std::string out_dir;               // metrics, summary, checkpoints; empty: no files
  double collective_timeout = comm::kDefaultCollectiveTimeout;  // seconds; sharded runs (comm/wait.hpp)
  int flight_ops = comm::kDefaultFlightOps;  // the flight recorder's ring, ops a rank (0: off; comm/flight.hpp)
  std::string flight_dump = "on-fault";      // on-fault, or always (also at exit)
  std::int64_t piece_kib = comm::kDefaultPieceBytes / 1024;  // [comm]: a message's pieces on the wire (0: whole)
  parallel::ShardOptions shard;         // [shard]: strategy and topology of a run under mpirun

  // Per invocation, never in a config file.
  std::string resume;                // a checkpoint dir, or an out dir (its newest checkpoint)
  bool overwrite = false;            // replace the results of an earlier run in out_dir
  std::int64_t stop_after = 0;       // end this invocation after that step (0: at `steps`)

  int seq_len() const { return seq > 0 ? seq : model.seq_len; }
  bool recomputes() const { return recompute == "full"; }
  std::int64_t last_step() const { return stop_after > 0 ? stop_after : steps; }
  std::size_t piece_bytes() const { return std::size_t(piece_kib) * 1024; }
  // Throws Error naming the key ("train.batch = 0: must be positive").
  void validate() const;
  nlohmann::json to_json() const;
};

// Raw settings by key, as read from a config file or the command line. Later sources
// (flags) replace earlier ones (the file) key by key; build_config applies them to the
// defaults: the model preset first, then model fields, then everything else.
using SettingValue = std::variant<std::int64_t, double, std::string>;
using Settings = std::map<std::string, SettingValue>;

enum class SettingKind { Int, Float, String };  // SettingValue's alternatives, in order
struct SettingInfo {
  const char* key;   // "section.name"
  const char* flag;  // "--name"
  SettingKind kind;
  const char* help;
  const char* bare = nullptr;  // what the flag given without a value means; nullptr: it takes one
};
const std::vector<SettingInfo>& setting_infos();
// The settings that shape a sharded run's spec beyond its strategy and topology (shard.*, less
// those): `strata plan` prices them and takes the same flags (cli/setting_flags.hpp).
bool shapes_spec(const SettingInfo& info);

// The shard options that shard.* settings give, each read by the table's own rule; errors name
// a setting by its flag (a command without a config file: strata plan).
parallel::ShardOptions build_shard_options(const Settings& settings);

// The bytes of a piece on the wire that the comm.* settings give (comm.piece_kib), by the
// table's own rule; errors name the flag (a command without a config file: strata bench
// collectives).
std::size_t build_piece_bytes(const Settings& settings);
// The table's entry of `key` (one of setting_infos()), for a command that takes only some.
const SettingInfo& setting_info(std::string_view key);

// Parses a TOML config file; refuses unknown sections and keys and wrong types, naming the
// file and key ("run.toml: train.lerning_rate: unknown key").
Settings read_config_file(const std::filesystem::path& path);
Settings parse_config_toml(std::string_view text, std::string_view origin);

// The model the model.* settings describe: the preset (default tiny), then field by field;
// a new vocab_size brings its padded size along unless that is given too. Validated.
model::ModelConfig build_model(const Settings& settings, std::string* preset_name = nullptr);

// Applies settings to the defaults and validates the result.
TrainConfig build_config(const Settings& settings);

}  // namespace strata::train
