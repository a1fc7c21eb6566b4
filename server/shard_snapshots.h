// A shard's backups as they form: every version v with is_backup_point(v) is snapshotted chunk by
// chunk as each chunk reaches it (a copy of values and optimizer slots); once every chunk of the
// shard has its snapshot, `ready` receives them all, oldest backup point first.
//
// Thread rules: owned by its ParameterShard (the server's event-loop thread); `ready` runs on
// that thread, inside the offer() that completes a backup.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <vector>

#include "common/storage/chunk_snapshot.h"
#include "server/shard_chunk.h"

namespace pstrain {

class ShardSnapshots {
 public:
  using Ready = std::function<void(uint64_t version, std::vector<ChunkSnapshot> chunks)>;

  void enable(std::function<bool(uint64_t)> is_backup_point, Ready ready) {
    is_backup_point_ = std::move(is_backup_point);
    ready_ = std::move(ready);
  }
  // The chunk reached a new version: snapshots it if that version is a backup point not yet
  // handed over; hands the backup over when all `chunks` chunks of the shard are in.
  void offer(const ShardChunk& chunk, size_t chunks) {
    if (!is_backup_point_ || !is_backup_point_(chunk.version) || chunk.version <= last_ready_) return;
    auto& taken = forming_[chunk.version];
    for (const ChunkSnapshot& s : taken) {
      if (s.key == chunk.info.key) return;  // this chunk's snapshot at this version is in already
    }
    taken.push_back(chunk.snapshot());
    if (taken.size() < chunks) return;
    std::vector<ChunkSnapshot> complete = std::move(taken);
    const uint64_t version = chunk.version;
    forming_.erase(forming_.begin(), forming_.upper_bound(version));
    last_ready_ = version;
    ready_(version, std::move(complete));
  }
  // A rollback: the forming backups belong to the old timeline.
  void clear() {
    forming_.clear();
    last_ready_ = 0;
  }

 private:
  std::function<bool(uint64_t)> is_backup_point_;
  Ready ready_;
  std::map<uint64_t, std::vector<ChunkSnapshot>> forming_;  // by version, until complete
  uint64_t last_ready_ = 0;                                  // newest version handed to ready_
};

}  // namespace pstrain
