#include "train/trainer.hpp"

#include <omp.h>

#include <chrono>
#include <cmath>
#include <vector>

#include <fmt/format.h>

#include "base/clock.hpp"
#include "base/cpu.hpp"
#include "base/error.hpp"
#include "base/fileio.hpp"
#include "base/plural.hpp"
#include "train/checkpoint.hpp"
#include "train/faults.hpp"
#include "train/preemption.hpp"
#include "train/progress.hpp"

namespace strata::train {

namespace fs = std::filesystem;

namespace {

const TrainConfig& validated(const TrainConfig& c) {
  c.validate();
  return c;
}

using Clock = std::chrono::steady_clock;

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
  auto full = [](const fs::path& p) { return fs::weakly_canonical(fs::absolute(p.empty() ? fs::path(".") : p)); };
  return full(a) == full(b);
}

}  // namespace

nlohmann::json StepMetrics::to_json() const {
  nlohmann::json j = {{"step", step}, {"loss", loss}, {"lr", lr}, {"grad_norm", grad_norm},
                      {"tokens_per_s", tokens_per_s}};
  if (val_loss) j["val_loss"] = *val_loss;
  if (skipped) j["skipped"] = true;
  if (loss_scale != 1) j["loss_scale"] = loss_scale;
  return j;
}

Trainer::Trainer(const TrainConfig& config, Engine& engine)
    : config_(validated(config)),
      engine_(engine),
      leader_(engine.rank() == 0),
      out_(config.out_dir),
      dims_(engine.parallel_dims()),
      tokens_per_step_(static_cast<double>(std::int64_t{config.batch} * config.seq_len() * config.grad_accum *
                                           dims_.data_parallel_size())),
      train_loader_(config.train_data, config.batch, config.seq_len(), dims_.data_parallel_rank(engine.rank()),
                    dims_.data_parallel_size(), config.seed, config.model.vocab_size) {
  if (!(engine.layout().config() == config_.model))
    throw Error("trainer: the engine was built for another model than the configuration names");
  if (!config_.val_data.empty()) {
    val_loader_.emplace(config_.val_data, config_.batch, config_.seq_len(), dims_.data_parallel_rank(engine.rank()),
                        dims_.data_parallel_size(), std::nullopt, config_.model.vocab_size);
    // A small validation file holds fewer batches than asked for; never count one twice.
    val_batches_ = static_cast<int>(std::min<std::int64_t>(config_.val_batches, val_loader_->batches_per_epoch()));
  }
  if (config_.loss_scale == "dynamic" || (config_.loss_scale == "auto" && engine_.fp16_gradients()))
    scaler_ = optim::LossScaler(config_.initial_loss_scale, config_.loss_scale_window);
  stop_request_ = [] { return PreemptionHandler::requested() != 0; };

  // Before anything reads or removes what the folder holds.
  agree(engine_, [&] {
    if (out_.empty() || !leader_) return;
    if (fs::exists(out_) && !fs::is_directory(out_))
      throw Error(fmt::format("{}: exists and is not a folder (train.out)", out_.string()));
    out_lock_.emplace(out_);
  });

  // The checkpoint to resume from: rank 0 verifies it shard by shard (and, given an output
  // folder, falls back past damaged ones), then tells the others.
  fs::path ckpt_dir;
  // `--resume latest` before the first checkpoint exists starts from step 0, so a job script
  // can pass it from its first submission on; what an attempt left without a checkpoint is
  // replaced like the steps after a checkpoint are.
  const bool fresh_latest = config_.resume == "latest" && !out_.empty() && checkpoint_steps(out_ / "ckpt").empty();
  if (!config_.resume.empty() && !fresh_latest) {
    std::string chosen;
    agree(engine_, [&] {
      if (!leader_) return;
      ResumeChoice choice = choose_checkpoint(resume_source());
      chosen = choice.dir.string();
      passed_over_ = std::move(choice.passed_over);
    });
    ckpt_dir = engine_.all_gather_strings(chosen).front();
    if (leader_)
      for (const std::string& why : passed_over_)
        fmt::print(stderr, "strata: --resume passes over a damaged checkpoint: {}\n", why);
    if (leader_ && !passed_over_.empty())
      fmt::print(stderr, "strata: --resume falls back to {}, the newest intact checkpoint\n", ckpt_dir.string());
  }
  // Every rank checks the output folder, then all agree: a rank must not find the files the
  // leader has begun to write, nor leave the others waiting in a collective.
  agree(engine_, [&] {
    if (!out_.empty()) {
      continue_output_ = fresh_latest || (!ckpt_dir.empty() && same_folder(ckpt_dir.parent_path(), out_ / "ckpt"));
      if (continue_output_ && config_.overwrite && !ckpt_dir.empty())
        throw Error(fmt::format("--overwrite would delete {}, the checkpoint --resume continues from; drop one of them",
                                ckpt_dir.string()));
      const bool earlier_results = fs::exists(out_ / "summary.json") || fs::exists(out_ / "metrics.jsonl") ||
                                   fs::exists(out_ / "ckpt");
      if (earlier_results && !continue_output_ && !config_.overwrite) throw Error(earlier_results_refusal());
    }
  });
  if (fresh_latest && leader_)
    fmt::print(stderr, "strata: --resume latest: no checkpoint in {} yet; starting from step 0\n", out_.string());
  if (!ckpt_dir.empty()) resume_from(ckpt_dir);
  if (continue_output_) earlier_metrics_ = read_metrics_until(out_ / "metrics.jsonl", start_step_);
}

std::string Trainer::earlier_results_refusal() const {
  const std::string start = fmt::format("{}: holds the results of an earlier run", out_.string());
  ResumeChoice newest;
  try {
    newest = choose_checkpoint(out_);
  } catch (const Error&) {
    return start + "; it has no intact checkpoint to continue from: replace them with --overwrite, or choose "
                   "another --out";
  }
  const std::int64_t step = Checkpoint::open(newest.dir).info().step;
  if (step >= config_.last_step())
    return fmt::format("{}, finished at step {} ({}): train on with --resume latest --steps N (N > {}), or replace "
                       "them with --overwrite",
                       start, step, newest.dir.string(), step);
  return fmt::format("{}; continue it with --resume latest (its newest intact checkpoint: {}, step {}), or replace "
                     "them with --overwrite",
                     start, newest.dir.string(), step);
}

fs::path Trainer::resume_source() const {
  if (config_.resume != "latest") return config_.resume;
  if (out_.empty()) throw Error("--resume latest: needs --out, the output folder whose newest checkpoint to continue");
  return out_;
}

nlohmann::json Trainer::run_identity() const {
  // What fixes the data stream and the meaning of a step: a resume must keep these. The
  // loader's stream depends on batch x world only (data/loader.hpp), so a checkpoint moves
  // between world sizes and strategies as long as that product stays.
  return {{"train.global_batch", static_cast<std::int64_t>(config_.batch) * dims_.data_parallel_size()},
          {"train.seq", config_.seq_len()},
          {"train.grad_accum", config_.grad_accum},
          {"train.seed", config_.seed},
          {"data.train_tokens", train_loader_.file().size()}};
}

void Trainer::resume_from(const fs::path& dir) {
  // Every rank reads the manifest and checks it against this run (the same verdict
  // everywhere), then all load their slices together.
  std::optional<Checkpoint> opened;
  TrainerState state;
  agree(engine_, [&] { state = check_resumable(opened.emplace(Checkpoint::open(dir))); });
  const Checkpoint& ckpt = *opened;
  load_checkpoint(engine_, ckpt);
  train_loader_.set_position(state.train_position);
  skipped_steps_ = state.skipped_steps;
  if (scaler_.dynamic() && state.dynamic_loss_scaling)  // a run that scaled before keeps its scale
    scaler_.restore(state.loss_scale, state.good_steps);
  start_step_ = ckpt.info().step;
  resumed_from_ = dir;
  resumed_digest_ = ckpt.state_digest();
}

TrainerState Trainer::check_resumable(const Checkpoint& ckpt) const {
  const fs::path& dir = ckpt.dir();
  const CheckpointInfo& info = ckpt.info();
  const std::string manifest = (dir / kManifestName).string();
  check_same_model(ckpt, config_.model);
  const nlohmann::json want = run_identity();
  for (auto& [key, value] : want.items()) {
    if (!info.run.is_object() || !info.run.contains(key))
      throw Error(fmt::format("{}: malformed: field 'run.{}' missing", manifest, key));
    if (info.run[key] == value) continue;
    // Ranks of one replica (a TP group, a pipeline's stages) read the same batch: the global
    // batch is batch x replicas, not x ranks.
    const int replicas = dims_.data_parallel_size();
    if (key == "train.global_batch")
      throw Error(fmt::format("{}: train.global_batch = {} in the checkpoint (batch x data-parallel replicas), {} in "
                              "this run (batch {} x {}); a resumed run must keep it: give --batch {}",
                              dir.string(), info.run[key].dump(), value.dump(), config_.batch,
                              count_of(replicas, "replica"),
                              info.run[key].is_number_integer() && info.run[key].get<std::int64_t>() % replicas == 0
                                  ? std::to_string(info.run[key].get<std::int64_t>() / replicas)
                                  : std::string("a batch that divides it")));
    throw Error(fmt::format("{}: {} = {} in the checkpoint, {} in this run; a resumed run must keep it", dir.string(),
                            key, info.run[key].dump(), value.dump()));
  }
  if (info.step >= config_.last_step())
    throw Error(fmt::format("{}: the checkpoint is at step {}; nothing left to train up to step {} (train.steps)",
                            dir.string(), info.step, config_.last_step()));
  return read_trainer_state(ckpt);
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
  info.engine = engine_.describe();
  info.run = run_identity();
  info.data = {{"train_epoch", train_loader_.epoch()}};
  // Training draws no random numbers after initialisation except the data order, which
  // (seed, position) fixes: the loader permutes each epoch from the seed and the epoch number.
  info.rng = {{"data_shuffle_seed", config_.seed}};
  put_trainer_state(info, {train_loader_.position(), skipped_steps_, scaler_.dynamic(), scaler_.scale(),
                           scaler_.good_steps()});
  const fs::path root = out_ / "ckpt";
  fs::path dir = save_checkpoint(engine_, root, info);
  // Only now that the new checkpoint is complete may older ones go.
  agree(engine_, [&] {
    if (leader_) prune_checkpoints(root, step, config_.keep_last);
  });
  return dir;
}

void Trainer::note(Progress& progress, const std::string& text) const {
  if (leader_) progress.note(text);
}

Trainer::StepDone Trainer::train_step(std::int64_t step, const StepHook& hook, Progress& progress) {
  std::vector<std::int32_t> tokens(static_cast<std::size_t>(config_.batch) * config_.seq_len()), targets(tokens.size());
  hook.before_step(step, engine_.rank());
  const auto t0 = Clock::now();
  const double loss_scale = scaler_.scale();
  const float grad_scale = 1.0f / static_cast<float>(config_.grad_accum);
  const float scale = hook.gradient_scale(step, engine_.rank(), grad_scale * static_cast<float>(loss_scale));
  double loss_sum = 0;
  for (int micro = 0; micro < config_.grad_accum; ++micro) {
    train_loader_.next(tokens.data(), targets.data());
    loss_sum += engine_.micro_step(tokens.data(), targets.data(), scale);
  }
  // One collective gives every rank the global loss and whether any rank must stop.
  const auto [loss, stop] = engine_.all_mean_and_any(loss_sum / config_.grad_accum, stop_request_());
  const float lr = optim::LrSchedule{config_.lr, config_.min_lr, config_.warmup, config_.steps}.at(step);
  StepArgs args{lr, step - skipped_steps_, loss_scale, !std::isfinite(loss)};
  const StepOutcome outcome = engine_.optimizer_step(config_.adamw, args);
  const double dt = seconds_since(t0);
  const nlohmann::json report = engine_.step_report();  // traffic and timing of this step
  // An overflow the scaler can still answer by lowering the scale is its normal work; only
  // steps it cannot help (no scaling, or the scale already at its floor) make a streak.
  const bool scaler_absorbs = scaler_.dynamic() && loss_scale > optim::LossScaler::kMinScale;
  scaler_.update(outcome.applied);
  if (outcome.applied)
    skipped_in_a_row_ = 0;
  else
    count_skipped(step, loss, outcome.grad_norm, scaler_absorbs, progress);
  // The first step of an invocation pays for page faults and thread start-up: not timed.
  if (step > start_step_ + 1 || config_.last_step() == start_step_ + 1) {
    train_seconds_ += dt;
    timed_tokens_ += tokens_per_step_;
  }
  return {{step, loss, lr, outcome.grad_norm, tokens_per_step_ / dt, std::nullopt, !outcome.applied, loss_scale},
          report,
          stop};
}

void Trainer::count_skipped(std::int64_t step, double loss, double grad_norm, bool scaler_absorbs,
                            Progress& progress) {
  ++skipped_steps_;
  if (!scaler_absorbs) ++skipped_in_a_row_;
  const fs::path& last_good = last_checkpoint_.empty() ? resumed_from_ : last_checkpoint_;
  note(progress, fmt::format("step {}: skipped: loss = {}, gradient norm = {}{} ({} in a row)", step, loss,
                             grad_norm, scaler_.dynamic() ? fmt::format("; loss scale now {}", scaler_.scale()) : "",
                             skipped_in_a_row_));
  if (skipped_in_a_row_ >= config_.max_skipped_steps)
    throw AgreedError(fmt::format("steps {}-{}: loss or gradient norm not finite {} steps in a row "
                                  "(train.max_skipped_steps = {}); training diverged (try a lower optim.lr); the last "
                                  "checkpoint is {}",
                                  step - skipped_in_a_row_ + 1, step, skipped_in_a_row_, config_.max_skipped_steps,
                                  last_good.empty() ? std::string("none") : last_good.string()));
}

void Trainer::log_step(const StepMetrics& m, const nlohmann::json& report, double eta_s, Progress& progress) {
  if (!leader_) return;
  if (metrics_.is_open()) {
    nlohmann::json line = m.to_json();
    line.update(report);
    metrics_ << line.dump() << "\n";
    metrics_.flush();
    if (!metrics_) throw Error(fmt::format("{}: write failed", (out_ / "metrics.jsonl").string()));
  }
  progress.update({m.step, config_.steps, config_.last_step(), m.loss, m.lr, m.grad_norm, m.tokens_per_s, eta_s});
  if (m.val_loss) note(progress, fmt::format("step {}: val loss {:.4f}", m.step, *m.val_loss));
}

bool Trainer::save_or_stop(std::int64_t step, bool stop, Progress& progress) {
  const bool stopping = stop && step < config_.last_step();
  const bool due = (config_.save_every > 0 && step % config_.save_every == 0) || step == config_.last_step();
  if (out_.empty()) {
    if (stopping) note(progress, fmt::format("step {}: stop requested (preemption); no --out, so no checkpoint", step));
  } else if (stopping || due) {
    last_checkpoint_ = save(step);
    note(progress, fmt::format("step {}: {}checkpoint {}", step, stopping ? "stop requested (preemption): " : "",
                               last_checkpoint_.string()));
  }
  return stopping;
}

TrainResult Trainer::run() {
  const auto t_start = Clock::now();
  prepare_output_folder();
  Progress progress(leader_ && Progress::stderr_is_terminal(), config_.log_every);
  if (!resumed_from_.empty()) note(progress, fmt::format("resumed from {} at step {}", resumed_from_.string(), start_step_));
  const StepHook& hook = step_hook_ ? *step_hook_ : FaultPlan::from_environment();
  const std::int64_t last = config_.last_step();
  TrainResult result;
  const auto t_loop = Clock::now();
  for (std::int64_t step = start_step_ + 1; step <= last; ++step) {
    StepDone done = train_step(step, hook, progress);
    if (val_loader_ && ((config_.val_every > 0 && step % config_.val_every == 0) || step == last))
      last_val_ = done.metrics.val_loss = validate();
    const double per_step = seconds_since(t_loop) / static_cast<double>(step - start_step_);
    log_step(done.metrics, done.report, per_step * static_cast<double>(last - step), progress);
    result.steps.push_back(done.metrics);
    result.preempted = save_or_stop(step, done.stop, progress);
    if (result.preempted) break;
  }
  progress.finish();
  result.summary = summary(result, seconds_since(t_start));
  if (leader_ && !out_.empty()) atomic_write_file(out_ / "summary.json", result.summary.dump(2) + "\n");
  return result;
}

nlohmann::json Trainer::summary(const TrainResult& result, double elapsed_s) const {
  const double first_loss = !earlier_metrics_.empty() ? earlier_metrics_.front()["loss"].get<double>()
                                                      : result.steps.front().loss;
  const auto& file = train_loader_.file();
  nlohmann::json data = {{"train", config_.train_data},
                         {"train_tokens", file.size()},
                         {"unigram_entropy", data::token_stats(file.tokens()).entropy_nats},
                         {"val", config_.val_data.empty() ? nlohmann::json(nullptr) : nlohmann::json(config_.val_data)},
                         {"val_tokens", val_loader_ ? nlohmann::json(val_loader_->file().size()) : nlohmann::json(nullptr)},
                         {"val_batches", val_batches_}};
  nlohmann::json summary = {
      {"steps", result.steps.back().step},
      {"start_step", start_step_},
      {"resumed_from", resumed_from_.empty() ? nlohmann::json(nullptr) : nlohmann::json(resumed_from_.string())},
      {"resumed_state_digest",
       resumed_from_.empty() ? nlohmann::json(nullptr) : nlohmann::json(digest_hex(resumed_digest_))},
      {"passed_over", passed_over_},
      {"preempted", result.preempted},
      {"skipped_steps", skipped_steps_},
      {"loss_scale", scaler_.scale()},
      {"loss", {{"first", first_loss}, {"final", result.steps.back().loss}}},
      {"val_loss", last_val_ ? nlohmann::json(*last_val_) : nlohmann::json(nullptr)},
      {"tokens_per_s", train_seconds_ > 0 ? timed_tokens_ / train_seconds_ : 0.0},
      {"tokens_per_step", tokens_per_step_},
      {"train_s", train_seconds_},
      {"elapsed_s", elapsed_s},
      {"threads", omp_get_max_threads()},
      {"isa", std::string(isa_name(detected_isa()))},
      {"world_size", engine_.world_size()},
      {"model",
       {{"preset", config_.model_name}, {"config", config_.model.to_json()}, {"params", config_.model.num_params()}}},
      {"data", data},
      {"checkpoint", last_checkpoint_.empty() ? nlohmann::json(nullptr) : nlohmann::json(last_checkpoint_.string())},
      {"config", config_.to_json()},
      {"version", STRATA_VERSION},
  };
  summary.update(engine_.summary_report());
  return summary;
}

}  // namespace strata::train
