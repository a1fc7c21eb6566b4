// ParameterShard's backups and holds (parameter_shard.h): cuts at a backup point, the holds
// lifted, restoring from snapshots, resets and aborts.
#include "server/parameter_shard.h"

namespace pstrain {

bool ParameterShard::backup_and_hold_at(uint64_t version) {
  for (const auto& [key, chunk] : chunks_) {
    if (chunk.version > version) return false;
  }
  holds_.cut_at(version);
  // Chunks already at `version` got there before it was a backup point: snapshot them now.
  for (auto& [key, chunk] : chunks_) {
    if (chunk.version == version) snapshots_.offer(chunk, chunks_.size());
  }
  apply_ready_sync_steps_everywhere();  // a hold moved up may free steps
  return true;
}

void ParameterShard::release_hold() {
  holds_.release_cut();
  apply_ready_sync_steps_everywhere();
}

std::vector<ChunkSnapshot> ParameterShard::snapshot_each() const {
  std::vector<ChunkSnapshot> out;
  for (const auto& [key, chunk] : chunks_) {
    out.push_back(chunk.snapshot());
  }
  return out;
}

void ParameterShard::abort_waiting(ShardChunk& chunk) {
  if (auto* async = std::get_if<AsyncRule>(&rule_)) return async->release_all(chunk.info.key);
  for (auto& p : std::get<SyncBarrier>(rule_).take_all(chunk.info.key)) {
    if (!p.alive || p.alive()) p.done({chunk.version, false, true});
  }
  // Clipping: a held step is a step not applied either (its pushes were answered already).
  chunk.held_examples = -1;
  chunk.held_factor.reset();
}

void ParameterShard::rolled_back(bool release_pulls_too) {
  snapshots_.clear();
  holds_.rolled_back();
  for (auto& [key, chunk] : chunks_) {
    abort_waiting(chunk);
    if (release_pulls_too) chunk.release_pulls();
  }
  if (auto* async = std::get_if<AsyncRule>(&rule_)) async->rolled_back();
}

void ParameterShard::restore(const std::map<uint32_t, ChunkSnapshot>& snapshots) {
  for (auto& [key, chunk] : chunks_) {
    chunk.restore(snapshots.at(key));
  }
  rolled_back(/*release_pulls_too=*/true);
}

void ParameterShard::reset() {
  for (auto& [key, chunk] : chunks_) {
    chunk.reset(*optimizer_);
    if (chunk.info.is_table_piece()) init_table_piece(layout_, seed_, chunk);
  }
  rolled_back(/*release_pulls_too=*/false);
}

void ParameterShard::abandon() {
  holds_.reject_all();
  for (auto& [key, chunk] : chunks_) {
    abort_waiting(chunk);
    auto pulls = std::move(chunk.waiting_pulls);
    chunk.waiting_pulls.clear();
    for (auto& [version, done] : pulls) done(chunk.version);
  }
}

void ParameterShard::abort_waiting_and_release_hold(uint64_t min_generation) {
  holds_.release_settle();
  holds_.reject_below(min_generation);
  for (auto& [key, chunk] : chunks_) abort_waiting(chunk);
}

void ParameterShard::release_durability_hold() {
  holds_.release_durable();
  apply_ready_sync_steps_everywhere();
}

}  // namespace pstrain
