// How a job starts once it has its nodes (JobRunner::try_start): its data prepared, the plan
// made, its servers connected and configured; and, for a job a restarted coordinator re-queued
// (Adoption), the way back to where it was: the servers' own state when they still hold it,
// otherwise the newest complete backup (sync) or consistent cut (async), the replayed steps
// recorded.
//
// Thread rules: event-loop thread only; owned by its JobRunner, refers to the runner's context
// and procedures, which outlive it.
#pragma once

#include <kj/async.h>

#include <cstdint>
#include <vector>

#include "coordinator/job/adoption.h"
#include "coordinator/job/async_cuts.h"
#include "coordinator/job/checkpointer.h"
#include "coordinator/job/job_context.h"
#include "coordinator/job/rollback.h"

namespace pstrain {

class JobStartup {
 public:
  JobStartup(JobContext& job, Adoption& adoption, AsyncCuts& async_cuts, Rollback& rollback,
             Checkpointer& checkpointer)
      : job_(job), adoption_(adoption), async_cuts_(async_cuts), rollback_(rollback), checkpointer_(checkpointer) {}

  // Loads the data, then configures the servers (or adopts their state); the job is RUNNING
  // (workers may start) when it resolves, unless a loss or a cancel came meanwhile.
  kj::Promise<void> run(std::vector<ServerMember> servers);

 private:
  kj::Promise<void> configure_servers();
  // Configures every server afresh (fresh shards), then resumes from the last complete backup if
  // a restarted coordinator recorded one (async: the newest stored cut, resume_async).
  kj::Promise<void> configure_and_resume();
  kj::Promise<void> adopt();
  // Sync, after a coordinator restart: the servers restored the backup at `version`; the workers
  // go on from there (the record says what was replayed).
  void resumed_sync(uint64_t version);
  // Async, after a coordinator restart: the servers' furthest version before they are configured
  // afresh; then the restore of the newest cut that every server holds and whose positions were
  // stored (the first usable of `candidates`, newest first), and the workers' positions.
  kj::Promise<uint64_t> servers_reached();
  kj::Promise<void> resume_async();
  kj::Promise<void> resume_async_from(std::vector<uint64_t> candidates);

  JobContext& job_;
  Adoption& adoption_;
  AsyncCuts& async_cuts_;
  Rollback& rollback_;
  Checkpointer& checkpointer_;
  uint64_t reached_before_restart_ = 0;  // after a restart: how far the job had come (servers, record)
};

}  // namespace pstrain
