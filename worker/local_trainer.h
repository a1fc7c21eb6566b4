// Trains a job in one process: the standalone trainer, and the reference that distributed runs
// are compared against (same data order, same initialisation, same update rule).
//
// It runs exactly what a sync-mode cluster runs, without the network: each step takes the next
// global_batch_size examples of the epoch's seeded order, computes the gradient of the summed
// loss, scales it by the step's example count, adds the L2 term and applies the optimizer.
//
// Resume and fine-tune (the same semantics as a job's init_from, common/data/job_spec.h): training may
// start from given parameters, with the optimizer's slots and update count and a global step S
// (resume: training.epochs is the total, as Keras' fit(epochs, initial_epoch); the run goes on at
// epoch S / steps_per_epoch, step S % steps_per_epoch, with the data order an uninterrupted run
// has there, so that it ends bit for bit where the uninterrupted run does), or with a fresh
// optimizer at step 0 (fine-tune). Checkpoints hand the state out every N global steps and at the
// end, by reference: the step loop copies nothing for them.
//
// Thread rules: one thread drives a LocalTrainer; Eigen may use more threads inside products
// (set with Eigen::setNbThreads by the caller).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "common/base/aligned.h"
#include "common/data/dataset.h"
#include "common/data/job_spec.h"
#include "common/engine/nn/loss.h"
#include "common/engine/optim/optimizer.h"

namespace pstrain {

struct EpochReport {
  int64_t epoch = 0;  // 1-based
  double train_loss = 0, train_accuracy = 0;
  double test_loss = 0, test_accuracy = 0;
  // Regression jobs: the test split's MAE, RMSE and R^2 come from these (accuracy stays 0).
  std::optional<nn::RegressionSums> test_regression;
  // Classification: top-5 accuracy (more than 5 classes) and AUC (binary cross-entropy).
  std::optional<double> test_top5_accuracy, test_auc;
  double samples_per_second = 0;  // training steps only, evaluation excluded
  double seconds = 0;
  float lr_scale = 1.0f;  // the learning rate's multiplier in this epoch (spec reduce_on_plateau)
  // The validation hold-out's figures (training.validation_fraction), as the test split's.
  struct Validation {
    double loss = 0, accuracy = 0;
    std::optional<nn::RegressionSums> regression;
    std::optional<double> top5_accuracy, auc;
  };
  std::optional<Validation> validation;
};

struct ProgressReport {
  int64_t epoch = 0, step_in_epoch = 0, steps_per_epoch = 0, global_step = 0;
  double running_loss = 0, running_accuracy = 0, samples_per_second = 0;
};

// Where training starts when not from the spec's seeded initialisation.
struct InitialState {
  std::vector<float> params;  // laid out by make_param_layout(spec.model)
  // Resume: the optimizer's slots (the spec's optimizer's make_state names, in order, each over
  // the whole layout) and update count. nullopt: a fresh optimizer (fine-tune).
  std::optional<optim::OptimizerState> optimizer;
  // Global steps (global batches) already applied; training goes on from here. Must be below the
  // spec's total steps (epochs x steps per epoch): otherwise train_locally throws "nothing to train".
  int64_t step = 0;
  // When >= 0: the training split's size the state was trained on; another size (and so another
  // data order) is an error.
  int64_t dataset_examples = -1;
};

// The state handed to on_checkpoint, valid during the call only.
struct TrainerCheckpoint {
  int64_t step = 0;             // global steps applied
  int64_t steps_per_epoch = 0;  // step / steps_per_epoch: epochs completed
  int64_t dataset_examples = 0; // the training split's size
  bool final = false;           // the end of this run (every epoch, or max_steps)
  std::span<const float> params;
  const optim::OptimizerState* optimizer = nullptr;
  const FittedPreprocessing* preprocessing = nullptr;  // a table's (kept in the file's metadata)
  Dtype input_dtype = Dtype::kFloat32;  // how the dataset stores examples (common/data/model_inputs.h)
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
  int64_t max_steps = -1;  // stop after this many steps of this run (-1: run every epoch)
  // nullptr: the spec's initialisation, a fresh optimizer, step 0.
  const InitialState* initial = nullptr;
  // Called every checkpoint_every global steps (when > 0; counted from step 0, not from this
  // run's start) and once at the end of the run with final = true (also when the end falls on a
  // multiple: one call). Exceptions it throws stop training.
  int64_t checkpoint_every = 0;
  std::function<void(const TrainerCheckpoint&)> on_checkpoint;
  std::function<void(const ProgressReport&)> on_progress;  // called about once a second
  std::function<void(const EpochReport&)> on_epoch;
};

struct TrainingResult {
  std::vector<EpochReport> epochs;  // the epochs this run trained in (a resumed epoch: its steps here)
  int64_t steps = 0;                // steps of this run
  int64_t final_step = 0;           // global steps applied at the end (start step + steps)
  AlignedFloats params;  // final parameters, laid out by make_param_layout(spec.model)
  optim::OptimizerState optimizer;  // final optimizer state
  // Early stopping (spec early_stopping) over this run's epochs, when it stopped the run or (with
  // restore_best) the final parameters are an earlier epoch's: 0-based epochs of this run; params
  // are then model_epoch()'s (the optimizer state stays the last step's, as Keras').
  std::optional<EarlyStoppingDecision> early_stopping;
};

// An epoch report's figure by the epoch metric's name (early_stopping_metrics()); nullopt when the
// job has none such.
std::optional<double> epoch_figure(const EpochReport& r, const std::string& name);

// Loads the datasets and trains. Throws DataError / SpecError for missing data or a bad spec,
// Error for an initial state that does not fit (size, optimizer slots, step past the end).
TrainingResult train_locally(const JobSpec& spec, const LocalTrainerOptions& options);

}  // namespace pstrain
