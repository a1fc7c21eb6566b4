// The coordinator's copies of the servers' backups (replicas), so that a lost server's shard can
// be restored onto another server (job/server_move.cc). They live on disk, in the coordinator's
// RocksDB under replica/<job>/<version>/<server index>/<chunk>, one value per chunk (an encoded
// snapshot, a few MB): a replica is as big as the servers' shards with their optimizer slots
// (Adam: three times the model), and the coordinator keeps a few versions of every server's, so
// in memory it would hold several copies of the model (DESIGN-NOTES "Message sizes"). Parts come
// in and go out through the store's own KvWriter thread, so the event loop never waits for the
// disk, and a read queued after a write sees it.
//
// Which replicas are whole, and which versions to keep, is the BackupLedger's business; this
// stores bytes, and beside the last part of a replica a marker that it is whole
// (replica/<job>/<version>/<server>/whole = its chunk count, in the same write as that part). So
// replicas survive a coordinator restart: the constructor lists what an earlier run left
// (whole_replicas()), a restarted coordinator's re-queued jobs put it back into their ledgers
// (JobRunner), and keep_only() deletes the replicas of every other job (DESIGN-NOTES
// "Coordinator loss").
//
// A checkpoint reads a whole backup's replicas chunk by chunk on a thread of its own
// (read_chunk(), straight from RocksDB, so the coordinator never holds more than one chunk of
// them): it pins the version first, and an erase of a pinned version waits for its unpin.
//
// Thread rules: thread-safe; put() and read() are called on a thread with a KJ event loop (the
// coordinator's), and their promises resolve there; read_chunk() on any thread. Ownership: borrows the KvStore (may be null:
// nothing is kept, and reads find nothing), owns its writer thread.
#pragma once

#include <kj/async.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "common/base/mutex.h"
#include "common/storage/kv_store.h"
#include "coordinator/store/kv_writer.h"

namespace pstrain {

// One server's replica of one backup of a job.
struct ReplicaId {
  std::string job;
  uint64_t version = 0;
  size_t server = 0;  // index in the job's server list
};

// A whole replica found on disk at start-up.
struct StoredReplica {
  uint64_t version = 0;
  size_t server = 0;
  size_t chunks = 0;
};

class ReplicaStore {
 public:
  explicit ReplicaStore(KvStore& kv);

  // Queues the write of chunks first .. first + blobs.size() - 1 of a replica of `total` chunks
  // (with its "whole" marker when this is the last part); resolves once they are on disk (not
  // synced: after a crash of the machine an older replica, or none, may be all there is).
  kj::Promise<void> put(const ReplicaId& id, size_t first, std::vector<std::string> blobs, size_t total);
  // The whole replicas of `job` that an earlier run left (listed by the constructor), ascending.
  std::vector<StoredReplica> whole_replicas(const std::string& job) const;
  // Deletes the replicas an earlier run left of every job not in `jobs` (those that will not run again).
  void keep_only(const std::set<std::string>& jobs);
  // Reads the replica's chunks from `first` while their bytes stay within max_bytes (at least
  // one), after every write queued before: resolves with them (empty if there are none).
  kj::Promise<std::vector<std::string>> read(const ReplicaId& id, size_t first, size_t max_bytes);
  // Resolves once every write queued before the call is applied (read_chunk() then sees it).
  kj::Promise<void> written();
  // Chunk `index` of a replica, read now on the calling thread (a pinned version: every write
  // of it already applied). nullopt if there is none.
  std::optional<std::string> read_chunk(const ReplicaId& id, size_t index) const;
  // While a version is pinned (a count: pins nest), erase() and erase_job() leave its replicas
  // in place and delete them at the last unpin.
  void pin(const std::string& job, uint64_t version);
  void unpin(const std::string& job, uint64_t version);
  // Deletes every server's replica of the job's backup at `version`.
  void erase(const std::string& job, uint64_t version);
  // Deletes every replica of the job.
  void erase_job(const std::string& job);

 private:
  // Queues the deletion of the stored replicas whose key prefix starts with `prefix`.
  void erase_matching(const std::string& prefix);

  KvStore& kv_;
  mutable Mutex mutex_;
  std::map<std::string, size_t> chunks_ PS_GUARDED_BY(mutex_);  // key prefix of a replica -> chunks written
  std::map<std::string, size_t> pins_ PS_GUARDED_BY(mutex_);    // key prefix of a version -> pins
  std::set<std::string> deferred_ PS_GUARDED_BY(mutex_);        // pinned version prefixes erased meanwhile
  std::map<std::string, std::vector<StoredReplica>> found_ PS_GUARDED_BY(mutex_);  // whole at start-up, by job
  KvWriter writer_;                       // last: its thread stops before the members above go
};

}  // namespace pstrain
