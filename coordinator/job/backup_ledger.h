// A job's backups as the coordinator knows them: which servers acknowledged which step, the steps
// that are complete backups (every server has written them; the last two are kept), waiters for
// a step to become complete, and the replicas of the servers' backups that let a free server take
// a lost one's shard over (server_move.cc).
//
// Which replicas are kept: a server sends the replica of each backup it made durable, and sends
// several at once when backups are written faster than their replicas travel (76 MB shards:
// replicas of four or five backups arrive interleaved). So the newest replica versions are often
// partial, of backups not complete yet. A version's replicas are dropped only once, for every
// server that sent a part of it, a newer complete backup has that server's whole replica, or its
// part can never be whole (the backup is complete: its server gave the replica up): the replica
// a move would use now (newest_replica) is never dropped, nor one still arriving that may
// become it. (Keeping "the last three versions" used to drop the only whole replica of a
// complete backup as soon as a third newer one began to arrive: a lost server then never moved.)
//
// Thread rules: event-loop thread only.
#pragma once

#include <kj/async.h>

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace pstrain {

class BackupLedger {
 public:
  // Server `index` (of `servers`) wrote its backup at `version`. Returns true when that made the
  // step a complete backup (the newest one); waiters for it are resolved.
  bool on_ack(size_t index, uint64_t version, size_t servers);
  // A complete backup known from elsewhere (a restarted coordinator's record).
  void add_complete(uint64_t version);
  // A complete backup turned out unusable (a server could not restore it); its replicas no longer
  // count for a move.
  void remove_complete(uint64_t version);
  const std::vector<uint64_t>& complete() const { return complete_; }  // ascending
  std::optional<uint64_t> latest() const;
  // Resolves once a complete backup at `version` or later exists.
  kj::Promise<void> wait_for(uint64_t version);

  // Replicas (the bytes are in the JobStore's ReplicaStore, on disk; the ledger knows which are
  // whole). A server sent chunks first .. first + count - 1 of its replica of the backup at
  // `version`, of `total` chunks (parts arrive in order). Returns the versions whose replicas
  // are no longer kept (drop_superseded_replicas()): delete their bytes. If `version` is among
  // them, this part is not needed either: do not store it.
  std::vector<uint64_t> add_replica_part(uint64_t version, size_t index, size_t first, size_t count, size_t total);
  // Forgets the replica versions no server needs any more (see the top of this file); returns
  // them: delete their bytes.
  // Call it when a backup becomes complete (on_ack() returned true); add_replica_part() calls it.
  std::vector<uint64_t> drop_superseded_replicas();
  // The newest complete backup with a whole replica of server `index`'s shard: its version and
  // chunk count, or nullopt. A complete backup whose replica of that server is partial (still
  // arriving, or given up by its server) is passed over for an older whole one.
  std::optional<std::pair<uint64_t, size_t>> newest_replica(size_t index) const;

  // The chunk count of server `index`'s replica of the backup at `version` if it is whole.
  std::optional<size_t> whole_replica(uint64_t version, size_t index) const;
  // Whether the replicas of the backup at `version` are whole for servers 0 .. servers - 1.
  bool replicas_whole(uint64_t version, size_t servers) const;

  // A rollback to `version`: acks and replicas of later backups belong to the abandoned timeline.
  // Returns the versions of the replicas forgotten: delete their bytes.
  std::vector<uint64_t> forget_after(uint64_t version);

 private:
  std::map<uint64_t, std::set<size_t>> acks_;  // version -> server indexes that wrote it
  std::vector<uint64_t> complete_;             // ascending; the last two are kept
  std::vector<std::pair<uint64_t, kj::Own<kj::PromiseFulfiller<void>>>> waiters_;
  bool is_complete(uint64_t version) const;

  struct ReplicaParts {
    size_t received = 0, total = 0;  // chunks
    bool whole() const { return total > 0 && received == total; }
  };
  struct ReplicaVersion {
    bool complete = false;                    // the backup is complete (every server wrote it)
    std::map<size_t, ReplicaParts> servers;  // by server index: the parts received
  };
  std::map<uint64_t, ReplicaVersion> replicas_;  // by version; see the top of this file
};

}  // namespace pstrain
