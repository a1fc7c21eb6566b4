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
  hold_from_ = version;
  // Chunks already at `version` got there before it was a backup point: snapshot them now.
  for (auto& [key, chunk] : chunks_) {
    if (chunk.version == version) take_snapshot_if_due(chunk);
  }
  for (auto& [key, chunk] : chunks_) apply_ready_sync_steps(chunk);  // a hold moved up may free steps
  return true;
}

void ParameterShard::release_hold() {
  hold_from_ = UINT64_MAX;
  for (auto& [key, chunk] : chunks_) apply_ready_sync_steps(chunk);
}

std::vector<ChunkSnapshot> ParameterShard::snapshot_each() const {
  std::vector<ChunkSnapshot> out;
  for (const auto& [key, chunk] : chunks_) {
    out.push_back({key, chunk.version, chunk.values, chunk.optimizer_state, chunk.worker_state});
  }
  return out;
}

void ParameterShard::abort_waiting(Chunk& chunk) {
  auto pending = std::move(chunk.pending);
  chunk.pending.clear();
  for (auto& [step, pushes] : pending) {
    for (auto& p : pushes) {
      if (!p.alive || p.alive()) p.done({chunk.version, false, true});
    }
  }
  auto held = std::move(chunk.held_replies);
  chunk.held_replies.clear();
  for (auto& [step, release] : held) release();
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
  snapshots_.clear();
  last_backup_ready_ = 0;
  hold_from_ = durability_hold_ = settle_hold_ = UINT64_MAX;
  ++rollbacks_;
  for (auto& [key, chunk] : chunks_) {
    abort_waiting(chunk);
    release_pulls(chunk);
  }
  for (auto& [worker, clock] : worker_clocks_) clock = 0;
}

void ParameterShard::reset() {
  for (auto& [key, chunk] : chunks_) {
    chunk.values = chunk.initial;
    chunk.optimizer_state = optimizer_->make_state(chunk.info.size);
    chunk.version = 0;
    chunk.worker_state.clear();
    values_replaced(chunk);
  }
  snapshots_.clear();
  last_backup_ready_ = 0;
  hold_from_ = durability_hold_ = settle_hold_ = UINT64_MAX;
  ++rollbacks_;
  for (auto& [key, chunk] : chunks_) abort_waiting(chunk);
  for (auto& [worker, clock] : worker_clocks_) clock = 0;
}

void ParameterShard::abandon() {
  min_generation_ = UINT64_MAX;
  for (auto& [key, chunk] : chunks_) {
    abort_waiting(chunk);
    auto pulls = std::move(chunk.waiting_pulls);
    chunk.waiting_pulls.clear();
    for (auto& [version, done] : pulls) done(chunk.version);
  }
}

void ParameterShard::abort_waiting_and_release_hold(uint64_t min_generation) {
  settle_hold_ = UINT64_MAX;
  reject_generations_below(min_generation);
  for (auto& [key, chunk] : chunks_) abort_waiting(chunk);
}

void ParameterShard::release_durability_hold() {
  durability_hold_ = UINT64_MAX;
  for (auto& [key, chunk] : chunks_) apply_ready_sync_steps(chunk);
}

}  // namespace pstrain
