// A job that a restarted coordinator re-queued (the essay is in adoption.cc): where its servers
// go, what it goes on from (the servers' state, or its newest complete backup wherever that is:
// on its servers' disks or in the replicas on the coordinator's), and the replicas a server
// placed at another index than before must adopt first.
//
// Thread rules: event-loop thread only. Refers to the job's JobContext and ServerMover, which
// outlive it.
#pragma once

#include <kj/async.h>

#include <functional>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "coordinator/job/job_context.h"
#include "coordinator/job/server_move.h"

namespace pstrain {

// Checks that every chunk of the job stands at one step v on every server, fences off the old
// plan's pushes at v (settle with the job's current generation) and lifts any hold the old
// coordinator left; resolves with v. Fails if the servers do not hold the job or are not at one
// step (the caller then configures them afresh).
kj::Promise<uint64_t> adopt_servers_state(JobContext& job);

class Adoption {
 public:
  Adoption(JobContext& job, ServerMover& mover) : job_(job), mover_(mover) {}

  // The job's record as the coordinator before left it: whether it was running, the server names
  // by index, and its complete backups (the record's last one, and every version whose replicas
  // are whole on the coordinator's disk for all its servers) with those replicas, into the
  // job's BackupLedger. Starts the wait for the recorded servers.
  void load(const JobRecord& record);
  bool requeued_while_running() const { return requeued_while_running_; }
  // The steps the record said were done (a floor for how far the job had come).
  uint64_t steps_done_before() const { return steps_done_before_; }

  // The names of the servers this job waits for (its recorded ones) while it is pending and the
  // wait lasts (JobOptions::move_lost_server_after from the restart): no other job takes them.
  std::vector<std::string> awaited_servers() const;
  // Picks the job's servers by index from the free ones (never one `awaited` by another job):
  // each recorded name at its index, other servers in name order where a recorded one is
  // missing. nullopt while the job still waits for a recorded server, or too few are free.
  std::optional<std::vector<NodeId>> place(const std::vector<NodeId>& free_servers,
                                           const std::set<std::string>& awaited, size_t count) const;
  // Once the servers are assigned: the indexes whose server is not the one that held the
  // index's backups (recorded under another name). Their backups come from the replicas.
  std::vector<size_t> moved() const;

  // For every moved index, adopts the replica of the newest complete backup that has whole
  // replicas for all of them and passes `usable` (async: a cut whose positions are stored);
  // resolves with its version, or nullopt (nothing adopted) when there is none or no index moved.
  // The moved servers' old names are told to drop the job if they come back (ServerMover).
  kj::Promise<std::optional<uint64_t>> adopt_replicas(std::function<bool(uint64_t)> usable);
  // Sync: resolves once the old coordinator's plan can no longer complete a step: one of the
  // job's workers said its session of the job ended (then every later step lacks its slice), or
  // after move_lost_server_after (then the servers' state is probed as it stands, and a backup
  // restored if it is not at one step).
  kj::Promise<void> old_plan_stopped();

 private:
  kj::Promise<void> wait_for_old_plan(kj::TimePoint until);

  JobContext& job_;
  ServerMover& mover_;
  bool requeued_while_running_ = false;
  std::vector<std::string> recorded_names_;  // by server index
  uint64_t steps_done_before_ = 0;
  uint64_t old_generation_ = 0;  // the plan the old coordinator ran (the record's)
  kj::TimePoint wait_until_ = kj::origin<kj::TimePoint>();
};

}  // namespace pstrain
