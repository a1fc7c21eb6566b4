// Runs one job on the cluster: claims servers and workers, places the parameters, configures the
// servers, hands out assignments, serves data, gathers progress and per-epoch evaluation, and at
// the end collects the trained parameters. A small orchestrator over parts with one job each, all
// sharing the job's JobContext (job_context.h):
//
//   ServerGroup   (server_group.h)   the job's servers, connections and every call to them
//   BackupLedger  (backup_ledger.h)  acks, complete backups, waiters, replicas
//   JobProgress   (job_progress.h)   workers' steps and rates, epoch metrics, the example ledger
//   JobOptions    (job_options.h)    every timeout
//
// and the recovery procedures, each an object of its own with an essay on why it works:
//
//   Rollback      (rollback.h)       servers back, restored to a common backup; a new plan
//   Takeover      (takeover.h)       a survivor completes a lost sync worker's step
//   SyncCut       (sync_cut.h)       backup just ahead and hold: preemption, a worker joining
//   AsyncCuts     (async_cuts.h)     async consistent cuts; a free worker replacing a lost one
//   ServerMover   (server_move.h)    a free server takes a lost one's shard from its replica
//   adoption      (adoption.h)       a restarted coordinator goes on from the servers' state
//   Checkpointer  (checkpointer.h)   backups kept as checkpoints; a job started from a file
//   EarlyStop     (early_stop.h)     the early stopping rule; the model from an epoch's checkpoint
//
//   JobStartup    (job_startup.h)    data, plan and servers; a re-queued job back where it was
//
// The runner decides which procedure runs when (on_node_lost, recover, grow, preempt) and
// applies their outcome (replan). One JobPhase says what it is doing; JobState derives from it.
//
// Thread rules: event-loop thread only.
#pragma once

#include <kj/async-io.h>

#include <chrono>
#include <functional>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "coordinator/job/adoption.h"
#include "coordinator/job/async_cuts.h"
#include "coordinator/job/checkpointer.h"
#include "coordinator/job/divergence_guard.h"
#include "coordinator/job/early_stop.h"
#include "coordinator/job/job_context.h"
#include "coordinator/job/job_startup.h"
#include "coordinator/job/rollback.h"
#include "coordinator/job/server_move.h"
#include "coordinator/job/sync_cut.h"
#include "coordinator/job/takeover.h"

namespace pstrain {

class JobRunner {
 public:
  using Finished = std::function<void(JobRunner&)>;

  // Adds the job's record to `store` (PENDING) and keeps it current from then on.
  // `origin`: the study and trial it runs for, if any (recorded with the job from the start).
  JobRunner(std::string id, JobSpec spec, Cluster& cluster, DataService& data, JobStore& store,
            kj::AsyncIoProvider& io, JobOptions options, Finished on_finished, JobOrigin origin = {});

  const std::string& id() const { return job_.id; }
  const JobSpec& spec() const { return job_.spec; }
  JobPhase phase() const { return job_.phase; }
  JobState state() const { return job_.state(); }
  const std::string& failure() const { return failure_; }
  // The trained parameters (laid out by the job's layout), read back from the stored model: empty
  // before the job has SUCCEEDED.
  std::vector<float> final_params() const;
  const ParamLayout& layout() const { return job_.layout; }

  // Claims servers and workers if the cluster has the ones it needs (never a server `awaited` by
  // another re-queued job), then loads the dataset and configures the servers in the background;
  // true if it claimed them.
  bool try_start(const std::set<std::string>& awaited = {});
  // Re-queued by a restarted coordinator: the recorded servers it waits for (Adoption).
  std::vector<std::string> awaited_servers() const { return adoption_.awaited_servers(); }
  // Fills an assignment for a worker of this job; false if the node is not one of its workers
  // or the servers are not configured yet.
  bool fill_assignment(NodeId node, proto::Assignment::Builder out) const;
  // Sync, after a coordinator restart: the resume step ends an epoch the job's history lacks, so
  // the workers evaluate it before the next (JobContext::restarted).
  bool evaluates_resumed_epoch(uint64_t steps_per_epoch) const;
  // `slice` >= 0: one of the worker's extra slices (JobContext::slices_of); -1: its own.
  proto::DataStream::Client open_shard(NodeId node, proto::Split split, uint32_t epoch, uint64_t from_step,
                                       int64_t slice = -1);
  // Returns whether the worker should keep going.
  bool on_progress(NodeId node, proto::Progress::Reader report);
  void fail(const std::string& reason);
  enum class CancelOutcome { kCancelled, kAlreadyFinished };
  // Stops the job (its workers stop at their next report) and frees its nodes.
  CancelOutcome cancel();
  bool ready_for_workers() const { return job_.workers_may_run(); }

  // --- Backups and recovery ---
  uint64_t generation() const { return job_.generation; }
  bool uses_node(NodeId node) const;
  // A server wrote its backup at `version`; the step is a complete backup once every server has.
  void on_backup_done(NodeId node, uint64_t version);
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
  // A server sent part of its replica of the backup at `version`: chunks first .. first +
  // chunks.size() - 1 (encoded chunk snapshots) of `total`. Resolves once they are stored.
  kj::Promise<void> on_replica(NodeId node, uint64_t version, size_t first, size_t total,
                               std::vector<std::string> chunks);
  // Resolves when the worker has an order (never for a session of an older plan).
  kj::Promise<WorkerOrder> watch(NodeId node, uint64_t generation);
  // Async cut: the worker stands between steps at `position`; resolves when it may go on.
  kj::Promise<void> paused(NodeId node, uint64_t cut, WorkerPosition position);

 private:
  // Sync worker loss without a rollback: false if the job cannot do it now (then it rolls back).
  bool try_take_over(size_t lost, const std::string& why);
  // The new plan from `version` with `workers` (after a rollback or a takeover).
  void replan(std::vector<NodeId> workers, uint64_t version, uint64_t replayed, const std::string& how);
  kj::Promise<void> collect_parameters();
  // Early stopping said stop: no epoch is recorded after the one it stopped at, and the job
  // succeeds with the model epoch's checkpoint as its model (EarlyStop::write_model).
  void stop_early();
  // The job's model is stored (`pieces` pieces, `bytes` bytes): it SUCCEEDS, says `note` if any,
  // and frees its nodes.
  void succeed(size_t pieces, int64_t bytes, uint64_t steps_done, const std::string& note);
  void finish_if_done();
  void release_nodes();
  void end(JobPhase phase, const std::string& reason);
  // The divergence guard found something: a warning in the record (an event, a count in
  // /metrics) for each finding, and with training.on_divergence "fail" the job fails with them.
  void diverged(const std::vector<Divergence>& found);

  JobContext job_;
  Finished on_finished_;
  std::string failure_;
  std::chrono::steady_clock::time_point started_at_;
  DivergenceGuard guard_;

  // The procedures (each refers to job_; declared after it).
  AsyncCuts async_cuts_{job_};
  SyncCut sync_cut_{job_};
  Takeover takeover_{job_};
  ServerMover mover_{job_};
  Rollback rollback_{job_, mover_, async_cuts_};
  Adoption adoption_{job_, mover_};  // a job a restarted coordinator re-queued
  EarlyStop early_stop_{job_};
  Checkpointer checkpointer_{job_, early_stop_};
  JobStartup startup_{job_, adoption_, async_cuts_, rollback_, checkpointer_};

  // Work in flight (each promise belongs to one procedure; destroyed with the runner).
  kj::Promise<void> recovery_ = nullptr;
  kj::Promise<void> takeover_task_ = nullptr;
  kj::Promise<void> grow_ = nullptr;
  kj::Promise<void> background_ = nullptr;
};

}  // namespace pstrain
