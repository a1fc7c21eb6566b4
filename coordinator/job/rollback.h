// The rollback (the essay is in rollback.cc): wait for every server of the job to be back (a
// restart under its name, or a free server taking its shard after
// JobOptions::move_lost_server_after), probe them, restore all of them to the newest backup they
// all hold intact (or to the initial values), and choose the workers of the new plan.
//
// Thread rules: event-loop thread only. Refers to the job's JobContext, its ServerMover and its
// AsyncCuts, which outlive it.
#pragma once

#include <kj/async.h>

#include <vector>

#include "coordinator/job/async_cuts.h"
#include "coordinator/job/job_context.h"
#include "coordinator/job/server_move.h"

namespace pstrain {

class Rollback {
 public:
  Rollback(JobContext& job, ServerMover& mover, const AsyncCuts& cuts);

  struct Outcome {
    uint64_t version = 0;            // the step every server is back at
    std::vector<NodeId> workers;     // the new plan's worker nodes
    uint64_t replayed = 0;           // steps done before the loss that are redone
  };
  // The whole rollback. Fails when a server does not come back within
  // JobOptions::server_return_timeout, or no backup (not even the start) can be restored.
  kj::Promise<Outcome> run();
  // Restores every server to the first usable of `candidates` (newest first; empty: the initial
  // values), dropping unusable ones from the ledger; resolves with the version restored.
  kj::Promise<uint64_t> restore(std::vector<uint64_t> candidates);
  // The backups every server holds, with those recorded as complete; newest first.
  kj::Promise<std::vector<uint64_t>> common_backups();

 private:
  kj::Promise<void> wait_for_servers(kj::TimePoint since, kj::TimePoint deadline);
  kj::Promise<void> probe_servers();

  JobContext& job_;
  ServerMover& mover_;
  const AsyncCuts& cuts_;
  uint64_t reached_version_ = 0;  // furthest version a live server had when probed
};

}  // namespace pstrain
