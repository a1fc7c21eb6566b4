// A free server taking a lost server's shard over from the replica of its newest complete
// backup (the essay is in server_move.cc).
//
// Thread rules: event-loop thread only. Refers to the job's JobContext, which outlives it.
#pragma once

#include <kj/async.h>

#include <set>

#include "coordinator/job/job_context.h"

namespace pstrain {

class ServerMover {
 public:
  explicit ServerMover(JobContext& job);

  // For each lost server: a free server takes its index and adopts its replica. Resolves when
  // those moves are done (a failed move gives the place back to the lost server); nullptr if no
  // lost server can move now (no free server, or no replica yet).
  kj::Maybe<kj::Promise<void>> move_lost();

 private:
  // Server `index` adopts the replica of the backup at `version` (`total` chunks) from chunk
  // `first` on, one part (at most rpc::kMaxPartBytes) read from disk and sent at a time.
  kj::Promise<void> adopt(size_t index, uint64_t version, size_t total, size_t first);

  JobContext& job_;
  std::set<NodeId> failed_spares_;      // servers a move to failed: not tried again
  std::set<NodeId> no_replica_logged_;  // lost servers already logged as having no replica
};

}  // namespace pstrain
