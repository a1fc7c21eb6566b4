// What a job's workers have done: each worker's steps, rate and whether it finished or was lost;
// the per-epoch metrics gathered from their reports (recorded in the JobStore once every worker
// evaluated); and, in sync mode, the example ledger (example_ledger.h).
//
// Thread rules: event-loop thread only.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "common/engine/nn/loss.h"
#include "coordinator/job/example_ledger.h"

#include "coordinator/store/job_store.h"

namespace pstrain {

// One split's evaluation (the test split, or the validation hold-out), summed over the workers'
// reports.
struct EvaluationSums {
  double loss_sum = 0;
  uint64_t correct = 0, examples = 0;
  uint64_t top_k_correct = 0;
  std::optional<nn::RegressionSums> regression;  // regression jobs
  std::optional<nn::BinaryScores> binary;        // binary jobs: the AUC's buckets
  uint32_t reports = 0;                          // workers that reported their slice

  EvaluationSums& operator+=(const EvaluationSums& other);
};

struct EpochMetrics {
  double train_loss_sum = 0;
  uint64_t train_correct = 0, train_examples = 0;
  EvaluationSums test, validation;
  double samples_per_second = 0;  // sum of the workers' training rates
  bool recorded = false;          // written to the store (once every worker has reported)
};

struct WorkerProgress {
  uint64_t steps = 0;  // latest step count reported (the worker's steps in the job)
  double rate = 0;     // latest samples/s reported
  bool finished = false;
  bool lost = false;   // async: lost, its place open for a free worker
};

class JobProgress {
 public:
  JobProgress(std::string job_id, uint32_t epochs, JobStore& store);

  // A new plan with `count` workers, each at `steps` (replan() sets async positions after).
  void reset_workers(size_t count, uint64_t steps);
  std::vector<WorkerProgress>& workers() { return workers_; }
  const std::vector<WorkerProgress>& workers() const { return workers_; }
  bool all_finished() const;
  // Sync: the furthest worker's steps; async: the sum over workers.
  uint64_t steps_done(bool sync) const;
  double total_rate() const;

  std::vector<EpochMetrics>& epochs() { return epochs_; }
  const std::vector<EpochMetrics>& epochs() const { return epochs_; }
  // Metrics of epochs from `first` on start over (their steps are redone).
  void restart_epochs_from(size_t first);
  // Adds a worker's evaluation of its test slice (`validation`: of its validation slice; `sums`
  // with reports = 1); records the epoch once `workers` have reported both (the validation one
  // only when the job holds one out: set_validation).
  void add_evaluation(uint32_t epoch, bool validation, const EvaluationSums& sums, double rate, size_t workers);
  void set_validation(bool held_out) { validation_ = held_out; }
  // What record_epoch reports besides loss and accuracy: top-5 (more than 5 classes) and AUC.
  void set_classes(int64_t classes) { classes_ = classes; }
  // Writes epoch e's metrics (printed line, history, record). `partial`: some workers' test
  // slices are missing (a worker was lost before it evaluated).
  void record_epoch(uint32_t epoch, bool partial);
  // Called after an epoch is recorded (0-based epoch; its test accuracy, nullopt if nothing of the
  // test split was evaluated): the owner's divergence guard.
  using EpochRecorded = std::function<void(uint32_t epoch, std::optional<double> test_accuracy)>;
  void on_epoch_recorded(EpochRecorded callback) { epoch_recorded_ = std::move(callback); }
  // Epochs from `first` (0-based) on are never recorded (early stopping ended the job before).
  void record_no_epoch_from(uint32_t first) { record_limit_ = first; }
  // Records every epoch before `before` that has evaluations but was not recorded.
  void record_partial_epochs(uint32_t before);
  // Test accuracy of the last epoch (0 if nothing was evaluated).
  double final_accuracy() const;

  // What each slice of each step was served (sync).
  ExampleLedger& ledger() { return ledger_; }

 private:
  std::string job_id_;
  JobStore& store_;
  std::vector<WorkerProgress> workers_;
  std::vector<EpochMetrics> epochs_;
  EpochRecorded epoch_recorded_;
  uint32_t record_limit_ = UINT32_MAX;
  bool validation_ = false;
  int64_t classes_ = 0;  // the model's classes (0: regression or not told)
  ExampleLedger ledger_;
};

}  // namespace pstrain
