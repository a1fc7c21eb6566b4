// A server's backups of its shards, in RocksDB: for each backup point (a version of a job), one
// blob per chunk (values, optimizer slots, step count), written in batches of a few MB and then
// a `complete` marker in a synced batch (the backup exists from the marker on). The KvStore checksums every blob; a backup with a missing or
// corrupt blob is unusable and load() says so.
//
// Thread rules: thread-safe (KvStore is), but in the server only its StoreThread calls it, so
// that reads and writes happen in the order they were asked for and never on the event loop.
// Ownership: borrows the KvStore, which must outlive this.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "common/base/aligned.h"
#include "common/storage/chunk_snapshot.h"
#include "common/storage/kv_store.h"
#include "common/engine/optim/optimizer.h"

namespace pstrain {


class BackupStore {
 public:
  // Backups kept per job (older ones are deleted when a new one is written).
  static constexpr size_t kKeep = 3;
  // A backup's blobs are written in RocksDB batches of about this many bytes (write()).
  static constexpr size_t kMaxBatchBytes = size_t{16} << 20;

  explicit BackupStore(KvStore& kv) : kv_(kv) {}

  // A backup written here stays (beyond kKeep if need be) until reported(): its replica is read
  // from the store after the write, and later backups may be written before that read runs
  // (storage slower than the steps), which must not delete it first.
  [[nodiscard]] KvStatus write(const std::string& job, uint64_t version, const std::vector<ChunkSnapshot>& chunks);
  // The backup's replica has been sent (or given up on): it may go with the next write's pruning.
  void reported(const std::string& job, uint64_t version);
  // The job's backups the coordinator may roll back to (its complete ones, as backupDone's reply
  // names them): kept beyond kKeep until a later call leaves them out. A server cut off from the
  // coordinator stops completing backups; the others go on writing theirs, and without this
  // their newest kKeep would no longer hold the step the job must roll back to. Not persisted:
  // a restarted server keeps its newest kKeep until its first report's reply.
  void set_restorable(const std::string& job, std::vector<uint64_t> versions);
  std::vector<uint64_t> restorable(const std::string& job) const;  // as last set, ascending
  // Complete backups of the job, oldest first.
  std::vector<uint64_t> versions(const std::string& job) const;
  // The chunks of one backup; nullopt (and *error) if it is incomplete or a blob is corrupt.
  // With `exact_versions` (sync backups), every chunk must be at `version` itself; an async cut
  // is named by the job's steps and its chunks keep their own versions.
  std::optional<std::map<uint32_t, ChunkSnapshot>> load(const std::string& job, uint64_t version, std::string* error,
                                                        bool exact_versions = true) const;
  // Part of a complete backup as stored (encoded snapshots, checksums verified, not decoded), for
  // a replica sent in bounded parts: the chunks from the `first`-th (in key order) while their
  // bytes stay within `max_bytes` (at least one). *total is the backup's chunk count. nullopt (and
  // *error) if the backup is incomplete (or was deleted meanwhile) or a blob is corrupt.
  std::optional<std::vector<std::string>> read_part(const std::string& job, uint64_t version, size_t first,
                                                    size_t max_bytes, size_t* total, std::string* error) const;
  // Writes part of a backup that arrives in parts (an adopted replica): `blobs` are encoded
  // snapshots of chunks `keys`. With `complete` set, also writes the `complete` marker for that
  // many chunks, in the same batch (the backup exists from then on; older ones beyond kKeep go).
  [[nodiscard]] KvStatus write_part(const std::string& job, uint64_t version, const std::vector<uint32_t>& keys,
                                    const std::vector<std::string>& blobs, std::optional<size_t> complete);
  // Deletes the job's backups after `version` (a rollback to it makes them another timeline's).
  [[nodiscard]] KvStatus erase_after(const std::string& job, uint64_t version);
  [[nodiscard]] KvStatus erase_job(const std::string& job);

 private:
  // Adds to `writes` the `complete` marker of a backup of `chunks` chunks and the deletion of the
  // job's oldest backups beyond kKeep.
  void complete_backup(const std::string& job, uint64_t version, size_t chunks, std::vector<KvStore::Write>& writes) const;

  KvStore& kv_;
  std::set<std::pair<std::string, uint64_t>> unreported_;  // (job, version) written, replica not yet read
  std::map<std::string, std::vector<uint64_t>> restorable_;  // job -> set_restorable()'s versions
};


}  // namespace pstrain
