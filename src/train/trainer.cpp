#include "train/trainer.hpp"

#include <omp.h>

#include <chrono>
#include <cmath>
#include <vector>

#include <fmt/format.h>

#include "base/cpu.hpp"
#include "base/error.hpp"
#include "base/fileio.hpp"
#include "train/checkpoint.hpp"
#include "train/progress.hpp"

namespace strata::train {

namespace fs = std::filesystem;

namespace {

const TrainConfig& validated(const TrainConfig& c) {
  c.validate();
  return c;
}

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// Metrics lines of an earlier run up to `last_step`; a line cut short by a crash ends the list.
std::vector<nlohmann::json> read_metrics_until(const fs::path& path, std::int64_t last_step) {
  std::vector<nlohmann::json> lines;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (!j.is_object() || !j.contains("step") || !j["step"].is_number_integer()) break;
    if (j["step"].get<std::int64_t>() > last_step) break;
    lines.push_back(std::move(j));
  }
  return lines;
}

bool same_folder(const fs::path& a, const fs::path& b) {
  return fs::weakly_canonical(fs::absolute(a)) == fs::weakly_canonical(fs::absolute(b));
}

}  // namespace

nlohmann::json StepMetrics::to_json() const {
  nlohmann::json j = {{"step", step}, {"loss", loss}, {"lr", lr}, {"grad_norm", grad_norm},
                      {"tokens_per_s", tokens_per_s}};
  if (val_loss) j["val_loss"] = *val_loss;
  return j;
}

Trainer::Trainer(const TrainConfig& config, Engine& engine)
    : config_(validated(config)),
      engine_(engine),
      leader_(engine.rank() == 0),
      out_(config.out_dir),
      train_loader_(config.train_data, config.batch, config.seq_len(), engine.rank(), engine.world_size(),
                    config.seed, config.model.vocab_size) {
  if (!(engine.layout().config() == config_.model))
    throw Error("trainer: the engine was built for another model than the configuration names");
  if (!config_.val_data.empty()) {
    val_loader_.emplace(config_.val_data, config_.batch, config_.seq_len(), engine.rank(), engine.world_size(),
                        std::nullopt, config_.model.vocab_size);
    // A small validation file holds fewer batches than asked for; never count one twice.
    val_batches_ = static_cast<int>(std::min<std::int64_t>(config_.val_batches, val_loader_->batches_per_epoch()));
  }
  // The output folder first: refusing it costs nothing, reading a checkpoint may take a while.
  // Every rank checks, then all agree: a rank must not find the files the leader has begun
  // to write, nor leave the others waiting in a collective.
  fs::path ckpt_dir;
  agree(engine_, [&] {
    if (!config_.resume.empty()) ckpt_dir = find_checkpoint(config_.resume);
    if (!out_.empty()) {
      if (fs::exists(out_) && !fs::is_directory(out_))
        throw Error(fmt::format("{}: exists and is not a folder (train.out)", out_.string()));
      continue_output_ = !ckpt_dir.empty() && same_folder(ckpt_dir.parent_path(), out_ / "ckpt");
      if (continue_output_ && config_.overwrite)
        throw Error(fmt::format("--overwrite would delete {}, the checkpoint --resume continues from; drop one of them",
                                ckpt_dir.string()));
      const bool earlier_results = fs::exists(out_ / "summary.json") || fs::exists(out_ / "metrics.jsonl") ||
                                   fs::exists(out_ / "ckpt");
      if (earlier_results && !continue_output_ && !config_.overwrite)
        throw Error(fmt::format("{}: holds the results of an earlier run; continue it with --resume {} or replace "
                                "them with --overwrite",
                                out_.string(), out_.string()));
    }
  });
  if (!ckpt_dir.empty()) resume_from(ckpt_dir);
  if (continue_output_) earlier_metrics_ = read_metrics_until(out_ / "metrics.jsonl", start_step_);
}

nlohmann::json Trainer::run_identity() const {
  // What fixes the data stream and the meaning of a step: a resume must keep these.
  return {{"train.batch", config_.batch},
          {"train.seq", config_.seq_len()},
          {"train.grad_accum", config_.grad_accum},
          {"train.seed", config_.seed},
          {"world_size", engine_.world_size()},
          {"data.train_tokens", train_loader_.file().size()}};
}

void Trainer::resume_from(const fs::path& dir) {
  Checkpoint ckpt = Checkpoint::open(dir);
  const CheckpointInfo& info = ckpt.info();
  check_same_model(ckpt, config_.model);
  const nlohmann::json want = run_identity();
  for (auto& [key, value] : want.items()) {
    if (!info.run.contains(key))
      throw Error(fmt::format("{}/{}: malformed: field 'run.{}' missing", dir.string(), kManifestName, key));
    if (info.run[key] != value)
      throw Error(fmt::format("{}: {} = {} in the checkpoint, {} in this run; a resumed run must keep it",
                              dir.string(), key, info.run[key].dump(), value.dump()));
  }
  if (info.world_size != engine_.world_size())
    throw Error(fmt::format("{}: world size {} in the checkpoint, {} in this run", dir.string(), info.world_size,
                            engine_.world_size()));
  if (info.step >= config_.last_step())
    throw Error(fmt::format("{}: the checkpoint is at step {}; nothing left to train up to step {} (train.steps)",
                            dir.string(), info.step, config_.last_step()));
  if (!info.data.contains("train_position") || !info.data["train_position"].is_number_unsigned())
    throw Error(fmt::format("{}/{}: malformed: field 'data.train_position' missing or not a non-negative integer",
                            dir.string(), kManifestName));
  load_checkpoint(engine_, ckpt);
  train_loader_.set_position(info.data["train_position"].get<std::int64_t>());
  start_step_ = info.step;
  resumed_from_ = dir;
}

void Trainer::prepare_output_folder() {
  if (out_.empty() || !leader_) return;
  fs::create_directories(out_);
  if (config_.overwrite && !continue_output_) {
    for (const char* name : {"summary.json", "metrics.jsonl", "ckpt"}) fs::remove_all(out_ / name);
  }
  // Continuing: the metrics of steps after the checkpoint belong to the abandoned attempt.
  std::string kept;
  for (auto& j : earlier_metrics_) kept += j.dump() + "\n";
  atomic_write_file(out_ / "metrics.jsonl", kept);
  metrics_.open(out_ / "metrics.jsonl", std::ios::app);
  if (!metrics_) throw Error(fmt::format("{}: cannot open for appending", (out_ / "metrics.jsonl").string()));
}

double Trainer::validate() {
  std::vector<std::int32_t> tokens(static_cast<std::size_t>(config_.batch) * config_.seq_len()), targets(tokens.size());
  val_loader_->set_position(0);  // the same batches every time, so values compare across steps
  double sum = 0;
  for (int i = 0; i < val_batches_; ++i) {
    val_loader_->next(tokens.data(), targets.data());
    sum += engine_.eval_loss(tokens.data(), targets.data());
  }
  return engine_.all_mean(sum / val_batches_);
}

fs::path Trainer::save(std::int64_t step) {
  CheckpointInfo info;
  info.step = step;
  info.model = config_.model;
  info.world_size = engine_.world_size();
  info.run = run_identity();
  info.data = {{"train_position", train_loader_.position()}, {"train_epoch", train_loader_.epoch()}};
  // Training draws no random numbers after initialisation except the data order, which
  // (seed, position) fixes: the loader permutes each epoch from the seed and the epoch number.
  info.rng = {{"data_shuffle_seed", config_.seed}};
  return save_checkpoint(engine_, out_ / "ckpt", info);
}

TrainResult Trainer::run() {
  const auto t_start = Clock::now();
  prepare_output_folder();

  const std::int64_t B = config_.batch, T = config_.seq_len();
  const std::int64_t last = config_.last_step();
  const double tokens_per_step = static_cast<double>(B * T * config_.grad_accum * engine_.world_size());
  std::vector<std::int32_t> tokens(static_cast<std::size_t>(B * T)), targets(tokens.size());
  const optim::LrSchedule schedule{config_.lr, config_.min_lr, config_.warmup, config_.steps};
  const float grad_scale = 1.0f / static_cast<float>(config_.grad_accum);

  Progress progress(leader_ && Progress::stderr_is_terminal(), config_.log_every);
  auto note = [&](const std::string& text) {
    if (leader_) progress.note(text);
  };
  if (!resumed_from_.empty()) note(fmt::format("resumed from {} at step {}", resumed_from_.string(), start_step_));

  TrainResult result;
  double train_seconds = 0, timed_tokens = 0;
  std::optional<double> last_val;
  fs::path last_checkpoint;
  const auto t_loop = Clock::now();
  for (std::int64_t step = start_step_ + 1; step <= last; ++step) {
    const auto t0 = Clock::now();
    double loss_sum = 0;
    for (int micro = 0; micro < config_.grad_accum; ++micro) {
      train_loader_.next(tokens.data(), targets.data());
      loss_sum += engine_.micro_step(tokens.data(), targets.data(), grad_scale);
    }
    const float lr = schedule.at(step);
    const double grad_norm = engine_.optimizer_step(config_.adamw, lr, step);
    const double loss = engine_.all_mean(loss_sum / config_.grad_accum);
    const double dt = seconds_since(t0);
    const nlohmann::json report = engine_.step_report();  // traffic and timing of this step
    if (!std::isfinite(loss) || !std::isfinite(grad_norm))
      throw Error(fmt::format("step {}: loss = {}, gradient norm = {}: not finite; training diverged (try a lower "
                              "optim.lr)",
                              step, loss, grad_norm));
    // The first step of an invocation pays for page faults and thread start-up: not timed.
    if (step > start_step_ + 1 || last == start_step_ + 1) {
      train_seconds += dt;
      timed_tokens += tokens_per_step;
    }

    StepMetrics m{step, loss, lr, grad_norm, tokens_per_step / dt, std::nullopt};
    if (val_loader_ && ((config_.val_every > 0 && step % config_.val_every == 0) || step == last)) {
      m.val_loss = validate();
      last_val = m.val_loss;
    }
    if (leader_) {
      if (metrics_.is_open()) {
        nlohmann::json line = m.to_json();
        line.update(report);
        metrics_ << line.dump() << "\n";
        metrics_.flush();
        if (!metrics_) throw Error(fmt::format("{}: write failed", (out_ / "metrics.jsonl").string()));
      }
      const double per_step = seconds_since(t_loop) / static_cast<double>(step - start_step_);
      progress.update({step, last, loss, lr, grad_norm, m.tokens_per_s, per_step * static_cast<double>(last - step)});
      if (m.val_loss) note(fmt::format("step {}: val loss {:.4f}", step, *m.val_loss));
    }
    if (!out_.empty() && ((config_.save_every > 0 && step % config_.save_every == 0) || step == last)) {
      last_checkpoint = save(step);
      note(fmt::format("step {}: checkpoint {}", step, last_checkpoint.string()));
    }
    result.steps.push_back(m);
  }
  progress.finish();

  const double first_loss = !earlier_metrics_.empty() ? earlier_metrics_.front()["loss"].get<double>()
                                                      : result.steps.front().loss;
  const auto& file = train_loader_.file();
  nlohmann::json data = {{"train", config_.train_data},
                         {"train_tokens", file.size()},
                         {"unigram_entropy", data::token_stats(file.tokens()).entropy_nats},
                         {"val", config_.val_data.empty() ? nlohmann::json(nullptr) : nlohmann::json(config_.val_data)},
                         {"val_tokens", val_loader_ ? nlohmann::json(val_loader_->file().size()) : nlohmann::json(nullptr)},
                         {"val_batches", val_batches_}};
  result.summary = {
      {"steps", last},
      {"start_step", start_step_},
      {"resumed_from", resumed_from_.empty() ? nlohmann::json(nullptr) : nlohmann::json(resumed_from_.string())},
      {"loss", {{"first", first_loss}, {"final", result.steps.back().loss}}},
      {"val_loss", last_val ? nlohmann::json(*last_val) : nlohmann::json(nullptr)},
      {"tokens_per_s", train_seconds > 0 ? timed_tokens / train_seconds : 0.0},
      {"tokens_per_step", tokens_per_step},
      {"train_s", train_seconds},
      {"elapsed_s", seconds_since(t_start)},
      {"threads", omp_get_max_threads()},
      {"isa", std::string(isa_name(detected_isa()))},
      {"world_size", engine_.world_size()},
      {"model",
       {{"preset", config_.model_name}, {"config", config_.model.to_json()}, {"params", config_.model.num_params()}}},
      {"data", data},
      {"checkpoint", last_checkpoint.empty() ? nlohmann::json(nullptr) : nlohmann::json(last_checkpoint.string())},
      {"config", config_.to_json()},
      {"version", STRATA_VERSION},
  };
  result.summary.update(engine_.summary_report());
  if (leader_ && !out_.empty()) atomic_write_file(out_ / "summary.json", result.summary.dump(2) + "\n");
  return result;
}

}  // namespace strata::train
