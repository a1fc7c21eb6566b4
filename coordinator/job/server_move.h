// A free server taking a lost server's shard over from the replica of its newest complete
// backup (the essay is in server_move.cc).
//
// Thread rules: event-loop thread only. Refers to the job's JobContext, which outlives it.
#pragma once

#include <kj/async.h>

#include <set>
#include <string>

#include "coordinator/job/job_context.h"

namespace pstrain {

class ServerMover : private kj::TaskSet::ErrorHandler {
 public:
  explicit ServerMover(JobContext& job);

  // For each lost server: a free server takes its index and adopts its replica. Resolves when
  // those moves are done (a failed move gives the place back to the lost server); nullptr if no
  // lost server can move now (no free server, or no replica yet).
  kj::Maybe<kj::Promise<void>> move_lost();

  // Server `node` has just registered. If it bears the name of a server this job's shard moved
  // away from (it was frozen, or cut off from the coordinator, and came back), it may still hold
  // the job's old shard and accept pushes of the old plan: it is told to drop the job, and is
  // kept from every job (NodeInfo::job) until it has, after which it is a free server (a spare).
  void on_server_registered(NodeId node);

  // Server `index` adopts the whole replica (`chunks` chunks) of the backup at `version` from the
  // coordinator's disk: a restarted coordinator placed it where another server's backups belong
  // (adoption.cc). The server must be configured for the index.
  kj::Promise<void> adopt_replica(size_t index, uint64_t version, size_t chunks) {
    return adopt(index, version, chunks, 0);
  }
  // A server of this name held the job's shard before and no longer does: if it registers again,
  // it is told to drop the job (on_server_registered).
  void moved_away(const std::string& name) { moved_away_.insert(name); }

 private:
  void taskFailed(kj::Exception&& exception) override;

  // Server `index` adopts the replica of the backup at `version` (`total` chunks) from chunk
  // `first` on, one part (at most rpc::kMaxPartBytes) read from disk and sent at a time.
  kj::Promise<void> adopt(size_t index, uint64_t version, size_t total, size_t first);

  JobContext& job_;
  std::set<NodeId> failed_spares_;      // servers a move to failed: not tried again
  std::set<NodeId> no_replica_logged_;  // lost servers already logged as having no replica
  std::set<std::string> moved_away_;    // names of the servers whose shard moved to another
  kj::TaskSet fences_{*this};           // dropJob calls to returned servers (cancelled with us)
};

}  // namespace pstrain
