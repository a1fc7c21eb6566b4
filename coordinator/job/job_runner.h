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
//   JobFaults     (job_faults.h)     backups, preemption, lost nodes, growth: which recovery
//                                    procedure runs when (rollback, takeover, cuts, server moves,
//                                    adoption), each an object of its own with an essay on why
//                                    it works, and the re-plan after it
//   Checkpointer  (checkpointer.h)   backups kept as checkpoints; a job started from a file
//   EarlyStop     (early_stop.h)     the early stopping rule; the model from an epoch's checkpoint
//   JobStartup    (job_startup.h)    data, plan and servers; a re-queued job back where it was
//
// The runner itself claims the nodes, answers the workers' calls and ends the job (succeed, fail,
// cancel). One JobPhase says what it is doing; JobState derives from it.
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

#include "common/data/example_digest.h"
#include "coordinator/job/checkpointer.h"
#include "coordinator/job/divergence_guard.h"
#include "coordinator/job/early_stop.h"
#include "coordinator/job/plateau_rate.h"
#include "coordinator/job/job_context.h"
#include "coordinator/job/job_faults.h"
#include "coordinator/job/job_startup.h"

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
  // Fills an assignment for a worker of this job; false if the node is not one of its workers
  // or the servers are not configured yet.
  bool fill_assignment(NodeId node, proto::Assignment::Builder out) const;
  // Sync, after a coordinator restart: the resume step ends an epoch the job's history lacks, so
  // the workers evaluate it before the next (JobContext::restarted).
  bool evaluates_resumed_epoch(uint64_t steps_per_epoch) const;
  // `slice` >= 0: one of the worker's extra slices (JobContext::slices_of); -1: its own.
  proto::DataStream::Client open_shard(NodeId node, proto::Split split, uint32_t epoch, uint64_t from_step,
                                       int64_t slice = -1);
  // Sync: what a worker that reads its own examples read for `slice` at steps from_step, ... of
  // `epoch` (the example ledger's record; ignored for an older plan).
  void on_served(NodeId node, uint64_t generation, uint32_t epoch, uint32_t slice, uint64_t from_step,
                 const std::vector<ExampleDigest>& digests);
  // Returns whether the worker should keep going.
  bool on_progress(NodeId node, proto::Progress::Reader report);
  void fail(const std::string& reason);
  enum class CancelOutcome { kCancelled, kAlreadyFinished };
  // Stops the job (its workers stop at their next report) and frees its nodes.
  CancelOutcome cancel();
  bool ready_for_workers() const { return job_.workers_may_run(); }

  // --- Backups and recovery ---
  uint64_t generation() const { return job_.generation; }
  // Backups, replicas, preemption, lost nodes, growth (job_faults.h).
  JobFaults& faults() { return faults_; }
  const JobFaults& faults() const { return faults_; }
  // Resolves when the worker has an order (never for a session of an older plan).
  kj::Promise<WorkerOrder> watch(NodeId node, uint64_t generation);
  // Async cut: the worker stands between steps at `position`; resolves when it may go on.
  kj::Promise<void> paused(NodeId node, uint64_t cut, WorkerPosition position);
  // reduce_on_plateau: epoch `epoch`'s learning-rate multiplier, once the epoch before is
  // recorded (plateau_rate.h).
  kj::Promise<float> learning_rate_scale(uint32_t epoch) { return plateau_.scale_for(epoch); }

 private:
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

  // The parts (each refers to job_; declared after it).
  EarlyStop early_stop_{job_};
  PlateauRate plateau_{job_};
  Checkpointer checkpointer_{job_, early_stop_};
  JobFaults faults_;
  JobStartup startup_{job_, faults_.adoption(), faults_.async_cuts(), faults_.rollback(), checkpointer_};

  kj::Promise<void> background_ = nullptr;  // starting, or the end's collection of the model
};

}  // namespace pstrain
