// A server's backups of its shards, in RocksDB: for each backup point (a version of a job), one
// blob per chunk (values, optimizer slots, step count), written in one atomic, synced WriteBatch
// together with a `complete` marker. The KvStore checksums every blob; a backup with a missing or
// corrupt blob is unusable and load() says so.
//
// Thread rules: thread-safe (KvStore is), but in the server only its StoreThread calls it, so
// that reads and writes happen in the order they were asked for and never on the event loop.
// Ownership: borrows the KvStore, which must outlive this.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "common/aligned.h"
#include "common/kv_store.h"
#include "common/optim/optimizer.h"

namespace pstrain {

struct ChunkSnapshot {
  uint32_t key = 0;
  uint64_t version = 0;
  AlignedFloats values;
  optim::OptimizerState optimizer_state;
};

class BackupStore {
 public:
  // Backups kept per job (older ones are deleted when a new one is written).
  static constexpr size_t kKeep = 3;

  explicit BackupStore(KvStore& kv) : kv_(kv) {}

  [[nodiscard]] KvStatus write(const std::string& job, uint64_t version, const std::vector<ChunkSnapshot>& chunks);
  // Complete backups of the job, oldest first.
  std::vector<uint64_t> versions(const std::string& job) const;
  // The chunks of one backup; nullopt (and *error) if it is incomplete or a blob is corrupt.
  // With `exact_versions` (sync backups), every chunk must be at `version` itself; an async cut
  // is named by the job's steps and its chunks keep their own versions.
  std::optional<std::map<uint32_t, ChunkSnapshot>> load(const std::string& job, uint64_t version, std::string* error,
                                                        bool exact_versions = true) const;
  // Deletes the job's backups after `version` (a rollback to it makes them another timeline's).
  [[nodiscard]] KvStatus erase_after(const std::string& job, uint64_t version);
  [[nodiscard]] KvStatus erase_job(const std::string& job);

 private:
  KvStore& kv_;
};

std::string encode_snapshot(const ChunkSnapshot& chunk);
std::optional<ChunkSnapshot> decode_snapshot(const std::string& blob);

}  // namespace pstrain
