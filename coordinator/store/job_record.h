// The coordinator's records of jobs and nodes, as every part of it passes them around: a job's
// spec, state, progress, metric history, checkpoints and async cuts (JobRecord), and a node as
// the REST API shows it (NodeView). Plain values: JobStore keeps and persists them
// (job_store.h), job_codec.h gives their stored form, job_json.h their REST views.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "coordinator/store/job_state.h"
#include "coordinator/store/worker_position.h"

namespace pstrain {

struct StepMetric {
  uint32_t worker = 0;
  uint32_t epoch = 0;        // 1-based
  uint64_t step = 0;         // steps this worker has done in the job
  double loss = 0, accuracy = 0, samples_per_second = 0;
  int64_t time_ms = 0;       // wall clock, Unix milliseconds
  // Payload bytes on the wire per step since the worker's previous report: gradients (or their
  // compressed form, or factors) pushed, values (or partial products) received.
  double bytes_pushed_per_step = 0, bytes_pulled_per_step = 0;
};

struct EpochMetric {
  uint32_t epoch = 0;  // 1-based
  // The training figures over the epoch's step reports; nullopt when this coordinator received
  // none for it (a restart at the epoch's end: its evaluation is done again, its training figures
  // went with the coordinator before).
  std::optional<double> train_loss, train_accuracy;
  double test_loss = 0, test_accuracy = 0, samples_per_second = 0;
  int64_t time_ms = 0;
  // Regression jobs: the test split's mean absolute error, root mean squared error and R^2
  // (accuracies stay 0).
  std::optional<double> test_mae, test_rmse, test_r2;
  // Classification: top-5 accuracy (more than 5 classes) and Keras' AUC (binary cross-entropy).
  std::optional<double> test_top5_accuracy, test_auc;
  // The validation hold-out's figures (training.validation_fraction), as the test split's.
  std::optional<double> val_loss, val_accuracy, val_mae, val_rmse, val_r2, val_top5_accuracy, val_auc;
};

struct JobRecord;
// The record's last-epoch figures (test_*, val_*, train_*) from epoch `m` (regression: no
// accuracies). Defined after JobRecord.
void set_epoch_figures(JobRecord& r, const EpochMetric& m);

// A checkpoint a user can list, download and start jobs from: a complete backup of the job's
// parameters with the optimizer's slots, as a safetensors file in the store (checkpoints.h).
struct CheckpointInfo {
  int64_t step = 0;        // sync steps done (async: pushes applied by the job's workers)
  int64_t epoch = 0;       // epochs completed at that step
  int64_t time_ms = 0;     // when the backup was complete
  int64_t bytes = 0;       // of the file, with the optimizer state
  bool final = false;      // the state at the end of a job that succeeded
  // The newest figures at that point (a step's training loss and accuracy; the last epoch's test).
  std::optional<double> train_loss, train_accuracy, test_loss, test_accuracy;
};

// A sign that the job's training went wrong (the divergence guard, coordinator/job/divergence_guard.h),
// with its figures. Each one is also a "warning" event and counts in /metrics
// (pstrain_divergence_total{reason}).
struct JobWarning {
  std::string reason;     // loss_not_finite | loss_above_start | chance_accuracy
  uint32_t epoch = 0;     // 1-based
  double value = 0;       // the figure (lowest training loss of the epoch, test accuracy)
  double threshold = 0;   // what it was compared with (starting loss, chance level + margin)
  std::string detail;     // one sentence with the figures
  int64_t time_ms = 0;
};

// Warnings recorded by this store's process, by reason (counters for /metrics).
struct WarningCounts {
  std::map<std::string, uint64_t> by_reason;
};

// Where a job with `early_stopping` stands (coordinator/job/early_stop.h), 1-based epochs.
struct EarlyStopStatus {
  std::string monitor;
  std::optional<int64_t> best_epoch;     // the best so far
  std::optional<double> best;            // its figure
  int64_t wait = 0;                      // epochs since it
  std::optional<int64_t> stopped_epoch;  // training ended after this epoch
  std::optional<int64_t> model_epoch;    // the epoch whose checkpoint is the job's model
  std::optional<int64_t> model_step;     // that checkpoint's step
};

// Where a job comes from when it is a study's trial (study_manager.h): set on its record from the
// start, so even its first state event names the study.
struct JobOrigin {
  std::string study;
  int64_t trial = -1;
};

struct JobRecord {
  std::string id, name, spec_json;
  std::string study;   // a study's trial (study_manager.h): the study's id, and the trial's number
  int64_t trial = -1;
  JobState state = JobState::kPending;
  std::string reason;             // why it FAILED, was CANCELLED or is RECOVERING
  std::vector<std::string> notes; // things worth knowing that happened (recoveries, skipped backups)
  std::vector<JobWarning> warnings;  // the divergence guard's findings, oldest first
  std::string mode;               // sync | async
  int64_t submitted_ms = 0, started_ms = 0, finished_ms = 0;
  int64_t epochs = 0, steps_per_epoch = 0, total_steps = 0, steps_done = 0;
  uint32_t current_epoch = 0;  // 1-based, 0 before the first step
  double samples_per_second = 0;
  std::optional<double> train_loss, train_accuracy, test_loss, test_accuracy;
  std::optional<double> test_mae, test_rmse, test_r2;  // regression jobs, the last epoch's
  std::optional<double> test_top5_accuracy, test_auc;  // classification, the last epoch's (see EpochMetric)
  std::optional<double> val_loss, val_accuracy;          // the last epoch's, with a validation hold-out
  std::vector<uint32_t> workers, servers;  // node ids
  std::vector<std::string> server_names;   // by server index (a restarted coordinator matches them)
  uint64_t generation = 0;                 // of the current plan (a restarted coordinator goes past it)
  std::optional<int64_t> last_backup_step;
  uint32_t recoveries = 0;
  std::vector<int64_t> replayed_steps;  // per recovery
  // By worker index, from each worker's latest report: payload bytes pushed and pulled per step.
  std::vector<double> bytes_pushed_per_step, bytes_pulled_per_step;
  std::vector<StepMetric> steps;
  std::vector<EpochMetric> epoch_history;
  bool has_model = false;
  int64_t model_bytes = 0;
  std::vector<CheckpointInfo> checkpoints;  // ascending step
  std::optional<EarlyStopStatus> early_stopping;  // jobs whose spec has it, once an epoch is recorded
  // Async: each worker's position at the job's latest consistent cuts, by the cut's backup
  // version (stored as job/<id>/cut/<version>, not in the record's JSON): where a restarted
  // coordinator resumes the workers (DESIGN-NOTES "Async state across a coordinator restart").
  std::map<uint64_t, std::vector<WorkerPosition>> async_cuts;

  bool finished() const { return is_finished(state); }
};

inline void set_epoch_figures(JobRecord& r, const EpochMetric& m) {
  r.test_loss = m.test_loss;
  r.test_accuracy = m.test_mae ? std::nullopt : std::optional<double>(m.test_accuracy);
  r.test_mae = m.test_mae;
  r.test_rmse = m.test_rmse;
  r.test_r2 = m.test_r2;
  r.test_top5_accuracy = m.test_top5_accuracy;
  r.test_auc = m.test_auc;
  r.val_loss = m.val_loss;
  r.val_accuracy = m.val_accuracy;
  r.train_loss = m.train_loss;
  r.train_accuracy = m.test_mae ? std::nullopt : m.train_accuracy;
}

struct NodeView {
  uint32_t id = 0;
  std::string role, name, address, job;
  int64_t registered_ms = 0, last_heartbeat_ms = 0;  // wall clock
  bool alive = true;
  std::string cpu;  // what it computes with, as it registered (empty: not said)
  uint64_t progress = 0;  // its heartbeats' progress counter (a worker's steps, a server's updates)
  bool stalled = false;   // alive, in a job, and not advancing (cluster.h)
};

// Wall-clock time, Unix milliseconds (what records and events carry).
inline int64_t now_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// A node's role and name, for node events (nullopt: unknown).
using NodeLookup = std::function<std::optional<NodeView>(uint32_t)>;

}  // namespace pstrain
