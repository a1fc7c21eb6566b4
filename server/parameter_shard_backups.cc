// ParameterShard's backups and holds (parameter_shard.h): snapshots at backup points, the holds
// that keep a version for a backup, cut or move, restoring from snapshots, resets and aborts.
#include "server/parameter_shard.h"

namespace pstrain {

void ParameterShard::enable_backups(std::function<bool(uint64_t)> is_backup_point, BackupReady ready) {
  is_backup_point_ = std::move(is_backup_point);
  backup_ready_ = std::move(ready);
}

void ParameterShard::take_snapshot_if_due(Chunk& chunk) {
  if (!is_backup_point_ || !is_backup_point_(chunk.version) || chunk.version <= last_backup_ready_) return;
  auto& taken = snapshots_[chunk.version];
  for (const ChunkSnapshot& s : taken) {
    if (s.key == chunk.info.key) return;  // this chunk's snapshot at this version is in already
  }
  taken.push_back({chunk.info.key, chunk.version, chunk.values, chunk.optimizer_state, chunk.worker_state});
  if (taken.size() < chunks_.size()) return;
  std::vector<ChunkSnapshot> complete = std::move(taken);
  const uint64_t version = chunk.version;
  snapshots_.erase(snapshots_.begin(), snapshots_.upper_bound(version));
  last_backup_ready_ = version;
  backup_ready_(version, std::move(complete));
}

bool ParameterShard::backup_and_hold_at(uint64_t version) {
  for (const auto& [key, chunk] : chunks_) {
    if (chunk.version > version) return false;
  }
  holds_.cut_at(version);
  // Chunks already at `version` got there before it was a backup point: snapshot them now.
  for (auto& [key, chunk] : chunks_) {
    if (chunk.version == version) take_snapshot_if_due(chunk);
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
    out.push_back({key, chunk.version, chunk.values, chunk.optimizer_state, chunk.worker_state});
  }
  return out;
}

void ParameterShard::abort_waiting(Chunk& chunk) {
  if (auto* async = std::get_if<AsyncRule>(&rule_)) return async->release_all(chunk.info.key);
  for (auto& p : std::get<SyncBarrier>(rule_).take_all(chunk.info.key)) {
    if (!p.alive || p.alive()) p.done({chunk.version, false, true});
  }
}

void ParameterShard::rolled_back(bool release_pulls_too) {
  snapshots_.clear();
  last_backup_ready_ = 0;
  holds_.rolled_back();
  for (auto& [key, chunk] : chunks_) {
    abort_waiting(chunk);
    if (release_pulls_too) release_pulls(chunk);
  }
  if (auto* async = std::get_if<AsyncRule>(&rule_)) async->rolled_back();
}

void ParameterShard::restore(const std::map<uint32_t, ChunkSnapshot>& snapshots) {
  for (auto& [key, chunk] : chunks_) {
    const ChunkSnapshot& s = snapshots.at(key);
    chunk.values = s.values;
    chunk.optimizer_state = s.optimizer_state;
    chunk.version = s.version;
    chunk.worker_state = s.worker_state;
    values_replaced(chunk);
  }
  rolled_back(/*release_pulls_too=*/true);
}

void ParameterShard::reset() {
  for (auto& [key, chunk] : chunks_) {
    chunk.values = chunk.initial;
    chunk.optimizer_state = optimizer_->make_state(chunk.info.size);
    chunk.version = 0;
    chunk.worker_state.clear();
    values_replaced(chunk);
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
