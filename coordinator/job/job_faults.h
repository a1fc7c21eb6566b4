// What a job does when its cluster changes under it: a backup completes, a replica arrives, a node
// is preempted or lost, a free worker could join. JobFaults owns the recovery procedures and the
// work each has in flight, and decides which one runs when:
//
//   Rollback      (rollback.h)       servers back, restored to a common backup; a new plan
//   Takeover      (takeover.h)       a survivor completes a lost sync worker's step
//   SyncCut       (sync_cut.h)       backup just ahead and hold: preemption, a worker joining
//   AsyncCuts     (async_cuts.h)     async consistent cuts; a free worker replacing a lost one
//   ServerMover   (server_move.h)    a free server takes a lost one's shard from its replica
//   Adoption      (adoption.h)       a restarted coordinator goes on from the servers' state
//
// and applies their outcome (replan: the job's workers, plan, resume step and generation). The
// job's end stays the runner's (JobRunner): a fault reaches it through Hooks (fail, finish).
//
// Ownership: held by the job's JobRunner; refers to its JobContext, EarlyStop and Checkpointer,
// which outlive it. Thread rules: event-loop thread only.
#pragma once

#include <kj/async.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "coordinator/job/adoption.h"
#include "coordinator/job/async_cuts.h"
#include "coordinator/job/checkpointer.h"
#include "coordinator/job/early_stop.h"
#include "coordinator/job/job_context.h"
#include "coordinator/job/rollback.h"
#include "coordinator/job/server_move.h"
#include "coordinator/job/sync_cut.h"
#include "coordinator/job/takeover.h"

namespace pstrain {

class JobFaults {
 public:
  // The parts of the job's end a fault reaches.
  struct Hooks {
    std::function<void(const std::string& reason)> fail;
    std::function<void()> finish_if_done;  // a lost async worker may have been the last one running
    std::function<void(uint32_t epoch)> epochs_restart_from;  // a rollback redoes epochs from `epoch`
  };

  JobFaults(JobContext& job, EarlyStop& early_stop, Checkpointer& checkpointer, Hooks hooks);

  bool uses_node(NodeId node) const;
  // A server wrote its backup at `version`; the step is a complete backup once every server has.
  // Returns the complete backups a recovery may roll back to (ascending): the server keeps them.
  std::vector<uint64_t> on_backup_done(NodeId node, uint64_t version);
  // A server sent part of its replica of the backup at `version`: chunks first .. first +
  // chunks.size() - 1 (encoded chunk snapshots) of `total`. Resolves once they are stored.
  kj::Promise<void> on_replica(NodeId node, uint64_t version, size_t first, size_t total,
                               std::vector<std::string> chunks);
  // A node of this job got SIGTERM: every server backs up at a step just ahead and holds there;
  // resolves when that backup is complete (at once if there is nothing to do; with the running
  // cut's backup if one is under way).
  kj::Promise<void> preempt(NodeId node);
  // A node of this job died (missed heartbeats, or a server registered again under its name).
  void on_node_lost(NodeId node, const std::string& why);
  // A server registered (a new node, or one back under its name): a server this job's shard
  // moved away from is told to drop the job before it is free (ServerMover).
  void on_server_registered(NodeId node) { mover_.on_server_registered(node); }
  // Sync: if the job runs with fewer workers than it asked for and a worker is free, takes it in
  // at the next step (a cut, then a re-plan from the cut: nothing replayed). Async: a free worker
  // takes the place of a lost one, from the lost one's last reported step.
  void grow();
  // Re-plans the job: waits for its servers, rolls every server back to the latest usable
  // backup, and hands the workers new assignments from there.
  void recover(const std::string& why);

  // The procedures the runner's other parts use (starting, the workers' calls).
  Adoption& adoption() { return adoption_; }
  const Adoption& adoption() const { return adoption_; }
  AsyncCuts& async_cuts() { return async_cuts_; }
  Rollback& rollback() { return rollback_; }
  const Takeover& takeover() const { return takeover_; }

 private:
  // Sync worker loss without a rollback: false if the job cannot do it now (then it rolls back).
  bool try_take_over(size_t lost, const std::string& why);
  // The new plan from `version` with `workers` (after a rollback or a takeover).
  void replan(std::vector<NodeId> workers, uint64_t version, uint64_t replayed, const std::string& how);

  JobContext& job_;
  EarlyStop& early_stop_;
  Checkpointer& checkpointer_;
  Hooks hooks_;

  AsyncCuts async_cuts_{job_};
  SyncCut sync_cut_{job_};
  Takeover takeover_{job_};
  ServerMover mover_{job_};
  Rollback rollback_{job_, mover_, async_cuts_};
  Adoption adoption_{job_, mover_};  // a job a restarted coordinator re-queued

  // Work in flight (each promise belongs to one procedure; destroyed with this).
  kj::Promise<void> recovery_ = nullptr;
  kj::Promise<void> takeover_task_ = nullptr;
  kj::Promise<void> grow_ = nullptr;
};

}  // namespace pstrain
