// Trains a job in one process: the standalone trainer, and the reference that distributed runs
// are compared against (same data order, same initialisation, same update rule).
//
// It runs exactly what a sync-mode cluster runs, without the network: each step takes the next
// global_batch_size examples of the epoch's seeded order, computes the gradient of the summed
// loss, scales it by the step's example count, adds the L2 term and applies the optimizer.
//
// Thread rules: one thread drives a LocalTrainer; Eigen may use more threads inside products
// (set with Eigen::setNbThreads by the caller).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "common/aligned.h"
#include "common/dataset.h"
#include "common/job_spec.h"

namespace pstrain {

struct EpochReport {
  int64_t epoch = 0;  // 1-based
  double train_loss = 0, train_accuracy = 0;
  double test_loss = 0, test_accuracy = 0;
  double samples_per_second = 0;  // training steps only, evaluation excluded
  double seconds = 0;
};

struct ProgressReport {
  int64_t epoch = 0, step_in_epoch = 0, steps_per_epoch = 0, global_step = 0;
  double running_loss = 0, running_accuracy = 0, samples_per_second = 0;
};

struct LocalTrainerOptions {
  std::string data_dir;
  // Where the splits come from. Empty: data_dir's built-in datasets and dataset directories
  // (load_any_split).
  SplitLoader load_split;
  // Threads that each compute the gradient of a slice of the batch (DataParallelModel); 1 leaves
  // the parallelism to the BLAS products.
  int replicas = 1;
  // When > 0: compute the first dense layer as the workers of a cluster with this many parameter
  // servers do (its kernel rows grouped by server, worker/first_layer_groups.h), so that results
  // equal such a sync cluster's bit for bit. 0: one product (slightly faster).
  uint32_t servers = 0;
  int64_t max_steps = -1;  // stop after this many steps in total (-1: run every epoch)
  std::function<void(const ProgressReport&)> on_progress;  // called about once a second
  std::function<void(const EpochReport&)> on_epoch;
};

struct TrainingResult {
  std::vector<EpochReport> epochs;
  int64_t steps = 0;
  AlignedFloats params;  // final parameters, laid out by make_param_layout(spec.model)
};

// Loads the datasets and trains. Throws DataError / SpecError for missing data or a bad spec.
TrainingResult train_locally(const JobSpec& spec, const LocalTrainerOptions& options);

}  // namespace pstrain
