// Runs one job on the cluster: claims servers and workers, places the parameters, configures the
// servers, hands out assignments, serves data, gathers progress and per-epoch evaluation, and at
// the end collects the trained parameters. A small orchestrator over parts with one job each:
//
//   ServerGroup   (server_group.h)   the job's servers, connections and every call to them
//   BackupLedger  (backup_ledger.h)  acks, complete backups, waiters, replicas
//   JobProgress   (job_progress.h)   workers' steps and rates, epoch metrics, the example ledger
//   JobOptions    (job_options.h)    every timeout
//
// and the recovery procedures, each in its own file with an essay on why it works:
// job_recovery.cc (rollback and re-plan), job_takeover.cc (a survivor completes a lost sync
// worker's step), job_cut.cc (sync cuts: preemption, a worker joining), job_async_cut.cc (async
// consistent cuts and worker replacement), job_server_move.cc (a free server takes a lost one's
// shard), and adopt_running_servers() below (a restarted coordinator goes on from the servers).
//
// One explicit Phase says what the runner is doing; JobState, what the outside sees, derives
// from it.
//
// Thread rules: event-loop thread only.
#pragma once

#include <kj/async-io.h>

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "common/chunk_plan.h"
#include "common/data_plan.h"
#include "common/job_spec.h"
#include "common/param_layout.h"
#include "common/rpc/rpc_util.h"
#include "coordinator/cluster.h"
#include "coordinator/data_service.h"
#include "coordinator/job/backup_ledger.h"
#include "coordinator/job/job_options.h"
#include "coordinator/job/job_progress.h"
#include "coordinator/job/server_group.h"
#include "coordinator/job_state.h"
#include "coordinator/job_store.h"

namespace pstrain {

// What a worker's watch call returns: a lost worker's slice of a sync step, for a surviving
// worker to compute and push in its place (job_takeover.cc), or (pause_cut > 0) an async cut to
// pause for (job_async_cut.cc).
struct WorkerOrder {
  uint64_t pause_cut = 0;
  uint64_t step = 0;  // global step
  uint32_t slice = 0, slice_count = 1;
  uint32_t epoch = 0;
  int64_t step_in_epoch = 0;
  std::vector<uint32_t> indices;
  std::shared_ptr<const Split> split;
};

class JobRunner {
 public:
  using Finished = std::function<void(JobRunner&)>;

  // What the runner is doing. Workers may run (assignments, data, reports) in kRunning,
  // kCutting and kTakingOver.
  enum class Phase {
    kPending,      // queued until the cluster has the servers and workers it needs
    kConfiguring,  // nodes claimed: loading the dataset, configuring the servers
    kRunning,      // workers train
    kCutting,      // sync: a cut is under way (servers back up just ahead and hold there)
    kTakingOver,   // sync: a survivor completes a lost worker's step; a re-plan follows
    kRecovering,   // rolling back: waiting for servers, restoring a backup, re-planning
    kSucceeded,
    kFailed,
    kCancelled,
  };
  static const char* phase_name(Phase phase);

  // Adds the job's record to `store` (PENDING) and keeps it current from then on.
  JobRunner(std::string id, JobSpec spec, Cluster& cluster, DataService& data, JobStore& store,
            kj::AsyncIoProvider& io, JobOptions options, Finished on_finished);

  const std::string& id() const { return id_; }
  const JobSpec& spec() const { return spec_; }
  Phase phase() const { return phase_; }
  JobState state() const;
  const std::string& failure() const { return failure_; }
  const std::vector<float>& final_params() const { return final_params_; }
  const ParamLayout& layout() const { return layout_; }

  // Claims servers and workers if the cluster has the ones it needs, then loads the dataset and
  // configures the servers in the background; true if it claimed them.
  bool try_start();
  // Fills an assignment for a worker of this job; false if the node is not one of its workers
  // or the servers are not configured yet.
  bool fill_assignment(uint32_t node, proto::Assignment::Builder out) const;
  proto::DataStream::Client open_shard(uint32_t node, proto::Split split, uint32_t epoch, uint64_t from_step);
  // Returns whether the worker should keep going.
  bool on_progress(uint32_t node, proto::Progress::Reader report);
  void fail(const std::string& reason);
  enum class CancelOutcome { kCancelled, kAlreadyFinished };
  // Stops the job (its workers stop at their next report) and frees its nodes.
  CancelOutcome cancel();
  bool ready_for_workers() const { return workers_may_run(); }

  // --- Backups and recovery ---
  uint64_t generation() const { return generation_; }
  bool uses_node(uint32_t node) const;
  // A server wrote its backup at `version`; the step is a complete backup once every server has.
  void on_backup_done(uint32_t node, uint64_t version);
  // A node of this job got SIGTERM: every server backs up at a step just ahead and holds there;
  // resolves when that backup is complete (at once if there is nothing to do; with the running
  // cut's backup if one is under way).
  kj::Promise<void> preempt(uint32_t node);
  // A node of this job died (missed heartbeats, or a server registered again under its name).
  void on_node_lost(uint32_t node, const std::string& why);
  // Sync: if the job runs with fewer workers than it asked for and a worker is free, takes it in
  // at the next step (a cut, then a re-plan from the cut: nothing replayed). Async: a free worker
  // takes the place of a lost one, from the lost one's last reported step.
  void grow();
  // Re-plans the job: waits for its servers, rolls every server back to the latest usable
  // backup, and hands the workers new assignments from there.
  void recover(const std::string& why);
  // A server sent its replica of the backup at `version` (encoded chunk snapshots).
  void on_replica(uint32_t node, uint64_t version, std::vector<std::string> chunks);
  // Resolves when the worker has an order (never for a session of an older plan).
  kj::Promise<WorkerOrder> watch(uint32_t node, uint64_t generation);
  // Async cut: the worker stands between steps at `position`; resolves when it may go on.
  struct Position {
    uint32_t epoch = 0;
    uint64_t step = 0;        // within the epoch
    uint64_t steps_done = 0;  // the worker's steps in the job
  };
  kj::Promise<void> paused(uint32_t node, uint64_t cut, Position position);

 private:
  bool workers_may_run() const {
    return phase_ == Phase::kRunning || phase_ == Phase::kCutting || phase_ == Phase::kTakingOver;
  }
  bool sync() const { return spec_.training.mode == TrainingMode::kSync; }
  std::optional<size_t> worker_index(uint32_t node) const;
  void fill_server_config(proto::JobConfig::Builder config) const;
  // Starting: load the data, then configure the servers (or adopt their state).
  kj::Promise<void> start(std::vector<ServerMember> servers);
  kj::Promise<void> configure_servers();
  // Configures every server afresh (fresh shards), then resumes from the last complete backup if
  // a restarted coordinator recorded one.
  kj::Promise<void> configure_and_resume();
  // After a coordinator restart: goes on from the servers' current state (sync, all chunks at one
  // step); fails if they do not hold the job or are not at one step.
  kj::Promise<void> adopt_running_servers();
  kj::Promise<void> run_recovery(std::string why);
  // Sync worker loss without a rollback: false if the job cannot do it now (then it rolls back).
  bool try_take_over(size_t lost, const std::string& why);
  kj::Promise<void> run_takeover(size_t lost, std::string why);
  // Async: starts a consistent cut when the job's steps passed the next backup point.
  void maybe_cut_async();
  kj::Promise<void> run_async_cut();
  void replace_lost_async_worker();
  // A worker of a running async cut will not pause (finished or lost).
  void cut_expects_no_more(uint32_t node);
  void end_async_cut();
  // Async rollback to `version`: sets resume_positions_ for `workers`; returns the first epoch
  // whose metrics start over.
  size_t async_resume(const std::vector<uint32_t>& workers, uint64_t version);
  // The new plan from `version` with `workers` (after a rollback or a takeover).
  void replan(std::vector<uint32_t> workers, uint64_t version, uint64_t replayed, const std::string& how);
  // Resolves when every server of the job is alive again (a restart under its name, or after
  // JobOptions::move_lost_server_after a free server that took over its replica); fails at
  // `deadline`.
  kj::Promise<void> wait_for_servers(kj::TimePoint since, kj::TimePoint deadline);
  // For each lost server: a free server takes its index and adopts its replica of the newest
  // complete backup (job_server_move.cc). Resolves when those moves are done; nullptr if no
  // lost server can move now (no free server, or no replica yet).
  kj::Maybe<kj::Promise<void>> move_lost_servers();
  kj::Promise<void> probe_servers();
  // The backups every server holds and the complete ones we recorded, newest first.
  kj::Promise<std::vector<uint64_t>> common_backups();
  kj::Promise<uint64_t> restore_servers(std::vector<uint64_t> candidates);
  // Every server backs up two steps ahead of the furthest chunk and holds there; resolves when
  // that backup is complete.
  kj::Promise<void> cut();
  kj::Promise<void> run_cut();
  // Marks a cut on every server; resolves with its step once no server is past it.
  kj::Promise<uint64_t> mark_cut(int attempt);
  kj::Promise<void> collect_parameters();
  void finish_if_done();
  void release_nodes();
  void end(Phase phase, const std::string& reason);

  // Inputs.
  std::string id_;
  JobSpec spec_;
  std::string spec_json_;
  Cluster& cluster_;
  DataService& data_;
  JobStore& store_;
  kj::AsyncIoProvider& io_;
  JobOptions options_;
  Finished on_finished_;
  // Re-queued by a restarted coordinator while it was running: first try to go on from the
  // servers' state (adopt), with the server names and generation it recorded.
  bool requeued_while_running_ = false;
  std::vector<std::string> recorded_server_names_;

  // The plan.
  Phase phase_ = Phase::kPending;
  std::string failure_;
  ParamLayout layout_;
  std::vector<ChunkInfo> chunks_;
  ServerGroup servers_;
  std::vector<uint32_t> workers_;  // node ids, by worker index
  std::shared_ptr<const Split> train_, test_;
  std::optional<DataPlan> plan_;
  uint64_t generation_ = 0;      // of the current plan: sessions of older ones are stale
  uint64_t resume_version_ = 0;  // the global step workers start from (sync)
  std::vector<Position> resume_positions_;  // async: where each worker starts

  // What happened.
  JobProgress progress_;
  BackupLedger backups_;
  std::vector<float> final_params_;
  std::chrono::steady_clock::time_point started_at_;
  uint32_t recoveries_ = 0;
  uint64_t reached_version_ = 0;  // furthest version a live server had when recovery probed
  std::set<uint32_t> preempted_;  // nodes that announced SIGTERM
  std::set<uint32_t> failed_spares_;  // servers a move to failed: not tried again

  // Orders to workers (watch calls), by worker node, this generation.
  std::map<uint32_t, kj::Own<kj::PromiseFulfiller<WorkerOrder>>> watchers_;
  // Async cuts: workers pause between steps, every server backs up, workers go on.
  struct AsyncCut {
    uint64_t id = 0;
    std::set<uint32_t> expected;              // worker nodes still to pause
    std::map<uint32_t, Position> positions;   // by worker node
    std::vector<kj::Own<kj::PromiseFulfiller<void>>> resumes;
    kj::Own<kj::PromiseFulfiller<void>> all_paused;
  };
  std::optional<AsyncCut> cut_;
  uint64_t cuts_started_ = 0;
  uint64_t next_cut_at_ = 0;  // job steps (sum over workers)
  std::map<uint64_t, std::vector<Position>> cut_positions_;  // backup version -> by worker index

  // Work in flight (each promise belongs to one procedure; destroyed with the runner).
  kj::Maybe<kj::ForkedPromise<void>> sync_cut_;  // the running sync cut (preemptions join it)
  kj::Promise<void> recovery_ = nullptr;
  kj::Promise<void> takeover_ = nullptr;
  kj::Promise<void> grow_ = nullptr;
  kj::Promise<void> cut_task_ = nullptr;
  kj::Promise<void> background_ = nullptr;
};

}  // namespace pstrain
