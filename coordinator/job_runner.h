// Runs one job on the cluster: claims servers and workers, places the parameters, configures the
// servers, hands out assignments, serves data, gathers progress and per-epoch evaluation, and at
// the end collects the trained parameters.
//
// Thread rules: event-loop thread only.
#pragma once

#include <kj/async-io.h>

#include <chrono>
#include <functional>
#include <map>
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
#include "coordinator/job_store.h"

namespace pstrain {

enum class JobState { kPending, kRunning, kRecovering, kSucceeded, kFailed, kCancelled };
const char* job_state_name(JobState state);

struct EpochMetrics {
  double train_loss_sum = 0;
  uint64_t train_correct = 0, train_examples = 0;
  double test_loss_sum = 0;
  uint64_t test_correct = 0, test_examples = 0;
  double samples_per_second = 0;  // sum of the workers' training rates
  uint32_t evaluations = 0;       // workers that reported their test slice
  bool recorded = false;          // written to the store (once every worker has reported)
};

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

// How the coordinator recovers jobs (flags of pstrain-coordinator).
struct RecoveryOptions {
  // A lost server that has not come back after this long is replaced by a free server, which
  // takes over its shard from the replica of its latest complete backup.
  kj::Duration move_lost_server_after = 10 * kj::SECONDS;
};

class JobRunner {
 public:
  using Finished = std::function<void(JobRunner&)>;

  // Adds the job's record to `store` (PENDING) and keeps it current from then on.
  JobRunner(std::string id, JobSpec spec, Cluster& cluster, DataService& data, JobStore& store,
            kj::AsyncIoProvider& io, RecoveryOptions recovery_options, Finished on_finished);

  const std::string& id() const { return id_; }
  const JobSpec& spec() const { return spec_; }
  JobState state() const { return state_; }
  const std::string& failure() const { return failure_; }
  const std::vector<EpochMetrics>& epochs() const { return epochs_; }
  const std::vector<float>& final_params() const { return final_params_; }
  const ParamLayout& layout() const { return layout_; }

  // Starts the job if the cluster has the servers and workers it needs; true if it started.
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
  bool ready_for_workers() const { return configured_ && state_ == JobState::kRunning; }

  // --- Backups and recovery (job_recovery.cc) ---
  uint64_t generation() const { return generation_; }
  bool uses_node(uint32_t node) const;
  // A server wrote its backup at `version`; the step is a complete backup once every server has.
  void on_backup_done(uint32_t node, uint64_t version);
  // A node of this job got SIGTERM: every server backs up at a step just ahead and holds there;
  // resolves when that backup is complete (or at once if there is nothing to do).
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
  // A lost worker's step is being completed by a survivor; the re-plan follows.
  bool taking_over() const { return taking_over_; }

 private:
  kj::Promise<void> configure_servers();
  // Configures every server afresh (fresh shards), then resumes from the last complete backup if
  // a restarted coordinator recorded one.
  kj::Promise<void> configure_and_resume();
  // After a coordinator restart: goes on from the servers' current state (sync, all chunks at one
  // step); fails if they do not hold the job or are not at one step.
  kj::Promise<void> adopt_running_servers();
  kj::Promise<void> connect_server(size_t index);
  kj::Promise<void> configure_server(size_t index);
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
  // RecoveryOptions::move_lost_server_after a free server that took over its replica); fails at
  // `deadline`.
  kj::Promise<void> wait_for_servers(kj::TimePoint since, kj::TimePoint deadline);
  // For each lost server: a free server takes its index and adopts its replica of the newest
  // complete backup (job_server_move.cc). Resolves when those moves are done; nullptr if no
  // lost server can move now (no free server, or no replica yet).
  kj::Maybe<kj::Promise<void>> move_lost_servers();
  kj::Promise<void> probe_servers();
  kj::Promise<std::vector<uint64_t>> common_backups();
  kj::Promise<uint64_t> restore_servers(std::vector<uint64_t> candidates);
  kj::Promise<void> wait_for_backup(uint64_t version);
  // Every server backs up two steps ahead of the furthest chunk and holds there; resolves when
  // that backup is complete.
  kj::Promise<void> cut();
  // Marks a cut on every server; resolves with its step once no server is past it.
  kj::Promise<uint64_t> mark_cut(int attempt);
  void resolve_backup_waiters();
  kj::Promise<void> collect_parameters();
  int worker_index(uint32_t node) const;
  bool sync() const { return spec_.training.mode == TrainingMode::kSync; }
  void finish_if_done();
  // Writes epoch e's metrics (printed line, history, record). `partial`: some workers' test
  // slices are missing (a worker was lost before it evaluated).
  void record_epoch(uint32_t epoch, bool partial);
  // Records every epoch before `before` that has evaluations but was not recorded.
  void record_partial_epochs(uint32_t before);
  void release_nodes();
  void drop_on_servers();
  void end(JobState state, const std::string& reason);

  std::string id_;
  JobSpec spec_;
  std::string spec_json_;
  Cluster& cluster_;
  DataService& data_;
  JobStore& store_;
  kj::AsyncIoProvider& io_;
  RecoveryOptions recovery_options_;
  Finished on_finished_;

  JobState state_ = JobState::kPending;
  std::string failure_;
  ParamLayout layout_;
  std::vector<ChunkInfo> chunks_;
  std::vector<uint32_t> servers_, workers_;  // node ids, by index
  std::vector<std::string> server_addresses_;
  std::vector<kj::Own<rpc::Connection>> server_connections_;
  std::vector<proto::ParameterServer::Client> server_clients_;
  bool configured_ = false;
  std::shared_ptr<const Split> train_, test_;
  std::optional<DataPlan> plan_;
  std::vector<EpochMetrics> epochs_;
  std::vector<bool> worker_finished_;
  std::vector<bool> worker_lost_;        // async: lost, its place open for a free worker
  std::vector<uint64_t> worker_steps_;   // latest step count reported by each worker
  std::vector<double> worker_rates_;     // latest samples/s reported by each worker
  std::vector<float> final_params_;
  std::chrono::steady_clock::time_point started_at_;
  // Recovery state.
  uint64_t generation_ = 0;
  uint64_t resume_version_ = 0;  // the global step workers start from (sync)
  bool recovering_ = false;
  std::vector<std::string> server_names_;               // by index: how a restarted server is known
  std::map<uint64_t, std::set<size_t>> backup_acks_;    // version -> server indexes that wrote it
  std::vector<uint64_t> complete_backups_;              // ascending; the last two are kept
  std::vector<std::pair<uint64_t, kj::Own<kj::PromiseFulfiller<void>>>> backup_waiters_;
  uint32_t recoveries_ = 0;
  uint64_t reached_version_ = 0;  // furthest version a live server had when recovery probed
  // Example ledger (sync): for each global step of the current timeline, the examples each
  // worker was served. A rollback to step b forgets steps >= b, so at the end the ledger holds
  // exactly the examples of the applied updates, and each epoch is checked to use every example
  // once (logged and kept in the job record).
  std::map<uint64_t, std::map<uint32_t, std::vector<uint32_t>>> ledger_;
  void check_ledger();
  kj::Promise<void> recovery_ = nullptr;
  std::map<uint32_t, kj::Own<kj::PromiseFulfiller<WorkerOrder>>> watchers_;  // by worker node, this generation
  bool taking_over_ = false;
  bool cutting_ = false;  // a cut() (preemption, new worker) is under way: servers hold
  std::set<uint32_t> preempted_;  // nodes that announced SIGTERM
  // Replicas of the servers' backups: version -> server index -> encoded chunk snapshots.
  std::map<uint64_t, std::map<size_t, std::vector<std::string>>> replicas_;
  std::set<uint32_t> failed_spares_;  // servers a move to failed: not tried again
  std::vector<std::string> recorded_server_names_;  // by index, from the record of a re-queued job
  bool adopt_ = false;  // re-queued while it was running: try to go on from the servers' state
  kj::Promise<void> takeover_ = nullptr;
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
  kj::Promise<void> cut_task_ = nullptr;
  std::map<uint64_t, std::vector<Position>> cut_positions_;  // backup version -> by worker index
  std::vector<Position> resume_positions_;                   // async: where each worker starts
  bool growing_ = false;
  kj::Promise<void> grow_ = nullptr;
  kj::Promise<void> background_ = nullptr;
};

}  // namespace pstrain
