// What one job's parts share: the job's inputs, its current plan and what has happened, owned by
// its JobRunner and handed by reference to the recovery procedures (rollback.h, takeover.h,
// sync_cut.h, async_cuts.h, server_move.h, adoption.h), so each procedure is an object of its
// own over the same state instead of one more set of methods on the runner.
//
// Thread rules: event-loop thread only. Ownership: JobRunner owns the context and every
// procedure; the references inside (cluster, data, store, io) outlive the runner.
#pragma once

#include <kj/async-io.h>

#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "common/engine/chunk_plan.h"
#include "common/data/data_plan.h"
#include "common/data/job_spec.h"
#include "common/engine/param_layout.h"
#include "common/engine/safetensors.h"
#include "coordinator/cluster/cluster.h"
#include "coordinator/datasets/data_service.h"
#include "coordinator/job/backup_ledger.h"
#include "coordinator/job/job_options.h"
#include "coordinator/job/job_progress.h"
#include "coordinator/job/server_group.h"
#include "coordinator/store/job_state.h"
#include "coordinator/store/job_store.h"
#include "coordinator/store/worker_position.h"

namespace pstrain {

// What a job's runner is doing. Workers may run (assignments, data, reports) in kRunning,
// kCutting and kTakingOver. The public JobState derives from it (job_state()).
enum class JobPhase {
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
const char* job_phase_name(JobPhase phase);
// Node ids as the job record (JSON) keeps them.
std::vector<uint32_t> node_numbers(const std::vector<NodeId>& nodes);
JobState job_state(JobPhase phase);

// What a worker's watch call returns: a lost worker's slice of a sync step, for a surviving
// worker to compute and push in its place (takeover.h), or (pause_cut > 0) an async cut to
// pause for (async_cuts.h).
struct WorkerOrder {
  uint64_t pause_cut = 0;
  uint64_t step = 0;  // global step
  uint32_t slice = 0, slice_count = 1;
};

// Each worker's open watch call (of the current generation), by node: how orders reach workers.
class WorkerWatches {
 public:
  // The worker's watch call: `fulfiller` resolves it (an earlier one of the node is replaced).
  void open(NodeId node, kj::Own<kj::PromiseFulfiller<WorkerOrder>> fulfiller) { open_[node] = kj::mv(fulfiller); }
  // Whether the node's watch call is open and waiting (not const: a fulfiller's isWaiting() is not).
  bool waiting(NodeId node);
  // Answers the node's watch call with `order` (it must be waiting) and closes it.
  void order(NodeId node, WorkerOrder order);
  // The plan changed: every open watch call fails (with `why`), so each worker of the old plan
  // ends its session even if it is blocked on a server that will never answer.
  void end_all(const std::string& why);

 private:
  std::map<NodeId, kj::Own<kj::PromiseFulfiller<WorkerOrder>>> open_;
};

struct JobContext {
  JobContext(std::string id, JobSpec spec, Cluster& cluster, DataService& data, JobStore& store,
             kj::AsyncIoProvider& io, JobOptions options);

  bool sync() const { return spec.training.mode == TrainingMode::kSync; }
  JobState state() const { return job_state(phase); }
  bool workers_may_run() const {
    return phase == JobPhase::kRunning || phase == JobPhase::kCutting || phase == JobPhase::kTakingOver;
  }
  std::optional<size_t> worker_index(NodeId node) const;
  // The slices a step's global batch is cut into. Sync: spec.training.workers, fixed for the job,
  // whatever the number of live workers: a lost worker's slices go to the survivors (as extra
  // slices), so a step always sums the same slices in the same order and a run with a lost
  // worker equals the uninterrupted one (DESIGN-NOTES "Slices"). Async: one per worker.
  uint32_t slices() const;
  // The slices worker `index` computes: its own (index), then its extras (the slices from
  // workers.size() on, dealt round-robin).
  std::vector<uint32_t> slices_of(size_t index) const;
  // Whether node `id` is registered and alive.
  bool alive(NodeId node) const;
  // A server's JobConfig (all but its index): the chunk table, the workers, the current generation.
  void fill_server_config(proto::JobConfig::Builder config) const;
  ServerGroup::ConfigFiller server_config() const {
    return [this](proto::JobConfig::Builder c) { fill_server_config(c); };
  }
  uint64_t steps_per_epoch() const { return static_cast<uint64_t>(plan->steps_per_epoch(0)); }
  // The job's steps in all (sync: global steps; async: every worker's, summed): where a job that
  // has run to the end stands.
  uint64_t total_steps() const;
  // The metadata of the job's model file: self-describing (the spec, where it stopped, which files
  // it was trained on), so the file can be used without the job (DESIGN-NOTES "Models").
  Metadata model_file_metadata(int64_t epoch, uint64_t step) const;
  // What the job's data is made of, from its spec (DataService::prepare()).
  DataRecipe data_recipe() const;
  // Takes the prepared data: the splits, a table's preprocessing, and the class weights resolved
  // on the training examples, written into spec and spec_json as a list (class_weight.h).
  void take_data(const JobData& data);

  // Inputs.
  const std::string id;
  // The spec as submitted, and its canonical text (what servers, workers and the job's files
  // receive). Changed once, by take_data() when the data is ready (class weights); never after.
  JobSpec spec;
  std::string spec_json;
  const ParamLayout layout;
  Cluster& cluster;
  DataService& data;
  JobStore& store;
  kj::AsyncIoProvider& io;
  const JobOptions options;

  // The plan.
  JobPhase phase = JobPhase::kPending;
  std::vector<ChunkInfo> chunks;
  ServerGroup servers;
  std::vector<NodeId> workers;  // node ids, by worker index
  // The job's data once prepared (take_data): train, test, validation (training.
  // validation_fraction's hold-out; train is the rest), and a table's preprocessing fitted for this
  // job (the splits are then its features; written into the job's model file and checkpoints).
  JobData prepared;
  std::optional<DataPlan> plan;
  uint64_t generation = 0;      // of the current plan: sessions of older ones are stale
  uint64_t resume_version = 0;  // the global step workers start from (sync)
  // Sync, after a coordinator restart: resume_version may end an epoch whose evaluation the old
  // coordinator did not record (the workers evaluate after an epoch's last step). Then the workers
  // start by evaluating it (JobRunner::fill_assignment), so the history has every epoch.
  bool restarted = false;
  std::vector<WorkerPosition> resume_positions;  // async: where each worker starts

  // What happened.
  JobProgress progress;
  BackupLedger backups;
  uint32_t recoveries = 0;
  std::set<NodeId> preempted;  // nodes that announced SIGTERM

  // Orders to workers (takeover.h, async_cuts.h), through their watch calls.
  WorkerWatches watches;
  // Whether worker node `node` has an open watch and is alive.
  bool can_order(NodeId node) { return watches.waiting(node) && alive(node); }
};

}  // namespace pstrain
