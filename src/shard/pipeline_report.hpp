#pragma once
// `strata train --pp P --print-schedule`: every stage's 1F1B program and the ops of its step
// (shard::PipelineSchedule, what the engine runs: its sends and receives with their peer stage,
// tier and bytes, the tied embeddings' sum, and the stage's sharding schedule), in
// --print-schedule's format (shard::op_section, shard::tier_section), and the bytes per tier a
// step averaged over the world ranks: what summary.json's comm.scheduled_per_step reports.
#include <string>

#include <nlohmann/json.hpp>

#include "shard/pipeline_engine.hpp"

namespace strata::shard {

// Collective over the engine's ranks: each stage rendered by its first replica's rank, as it
// runs it; the document on every rank.
nlohmann::json pipeline_schedule_json(PipelineEngine& engine);
// The document as text.
std::string pipeline_schedule_table(const nlohmann::json& doc);

}  // namespace strata::shard
