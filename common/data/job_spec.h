// A training job, as typed structs parsed once at the edge (REST body or spec file).
//
// parse_job_spec() is strict: unknown fields, wrong types, out-of-range numbers and specs that
// cannot run (shapes that do not fit, an unknown dataset) are all rejected with a SpecError whose
// path names the field. Defaults follow TensorFlow/Keras where there is one.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/data/class_weight.h"
#include "common/data/early_stopping.h"
#include "common/data/reduce_on_plateau.h"
#include "common/data/preprocessing.h"
#include "common/data/training_spec.h"
#include "common/engine/model_spec.h"
#include "common/engine/optim/optimizer_spec.h"

namespace pstrain {

struct DatasetInfo;
struct Split;

const char* shard_policy_name(ShardPolicy policy);

// What the coordinator keeps of a job's backups as checkpoints a user can list, download, evaluate
// and start other jobs from (like Keras' ModelCheckpoint max_to_keep): the newest `keep` complete
// backups, and always the final state (parameters, optimizer slots and step) of a job that
// succeeds. Spec: `checkpoint: {"keep": K}`.
struct CheckpointSpec {
  int64_t keep = 1;
};

// Where a job's starting parameters come from (spec `init_from`): a checkpoint of another job
// (`{"job": ID, "checkpoint": STEP | "latest"}`) or a model (`{"model": ID}`, uploaded or a
// finished job's). With optimizer_state (resume), the optimizer's slots and update count come
// too and the job goes on from the checkpoint's step (training.epochs is the total, as Keras'
// fit(epochs, initial_epoch)); without (fine-tune), a fresh optimizer and step 0. Names and
// shapes must match the model's (checked when the job is submitted).
struct InitFromSpec {
  enum class Source { kNone, kJob, kModel };
  Source source = Source::kNone;
  std::string id;                      // the job's or the model's
  std::optional<int64_t> checkpoint;   // kJob: the step; nullopt: the latest
  bool optimizer_state = false;
};

struct JobSpec {
  std::string name;
  Precision precision = Precision::kFloat32;
  DatasetSpec dataset;
  ModelSpec model;
  LossSpec loss;
  OptimizerSpec optimizer;
  TrainingSpec training;
  BackupSpec backup;
  CheckpointSpec checkpoint;
  InitFromSpec init_from;
  // Spec `early_stopping` (early_stopping.h): sync training only; the job backs up at every
  // epoch end and keeps the checkpoints the rule may still need.
  EarlyStoppingSpec early_stopping;
  // Spec `reduce_on_plateau` (reduce_on_plateau.h): sync training, a constant learning rate.
  ReduceOnPlateauSpec reduce_on_plateau;
  // Spec `preprocessing` (preprocessing.h): how a table's columns become features. A table
  // dataset is always preprocessed (the defaults when the spec has no section); another dataset
  // with this section is refused at submit.
  PreprocessingSpec preprocessing;
};

// Parses and validates a job spec. Throws SpecError (kMalformed for text that is not JSON,
// kInvalid for everything else) naming the field. The dataset is checked as validate_job_spec(spec)
// does: what every process receiving a job needs (a server or worker does not know the catalog).
JobSpec parse_job_spec(std::string_view json_text);
// The same, strict about the dataset: it must be one of `datasets` and the spec must fit it.
JobSpec parse_job_spec(std::string_view json_text, const std::vector<DatasetInfo>& datasets);
// A spec the coordinator accepted (a worker's assignment, a server's job configuration): parsed
// and checked like parse_job_spec except against the dataset, which the coordinator checked
// against the datasets it knows (built in or from its catalog; the receiver may know none).
JobSpec parse_accepted_job_spec(std::string_view json_text);

// The dataset checks. Without a list: the name follows the dataset name rule, and a built-in
// dataset (the dataset table) must fit the spec; any other name is left to whoever knows the
// datasets (the coordinator's catalog at submit, the loaded files at job start). With a list: the
// dataset must be in it and fit the spec (check_spec_against_dataset).
void validate_job_spec(const JobSpec& spec);
void validate_job_spec(const JobSpec& spec, const std::vector<DatasetInfo>& datasets);

// The spec fits the dataset, else SpecError naming the field:
// - /model/input_shape equals the dataset's example shape ([h, w, c] for images), or is its flat
//   form [h * w * c] (a dense layer can take the image's values directly); skipped when the
//   DatasetInfo does not know its example shape;
// - the last layer (/model/layers/<last>) outputs [num_classes] logits (1 under
//   binary_cross_entropy), or for a regression dataset [target_width] values;
// - the loss fits the labels: a class loss on class labels, a regression loss on float targets.
// The DatasetInfo form is the submit-time check (the dataset table, nothing loaded); the Split
// form is the job-start check against the files as loaded.
void check_spec_against_dataset(const JobSpec& spec, const DatasetInfo& info);
void check_spec_against_dataset(const JobSpec& spec, const Split& split);

// Keras infers a model's input shape from the data it is given; so does a job: the spec text with
// /model/input_shape filled in from the dataset when the model has none (a table's width after the
// spec's preprocessing, else the dataset's example shape), to be parsed as usual (the job's record
// then shows the shape). The text as it is when it has a shape, is not a JSON object with a
// "model" object, or the dataset's shape is not known before its files load.
std::string with_inferred_input_shape(const std::string& spec_json, const DatasetInfo& info);
// The dataset a spec text names (its /dataset/name), or "" when it names none.
std::string spec_dataset_name(const std::string& spec_json);

// A model alone ({"input_shape", "seed", "layers"}, the "model" field of a job spec): parsed and
// checked as in a job spec (infer_shapes), throwing SpecError naming the field ("/model/...").
// Uploaded model files carry their architecture this way.
ModelSpec parse_model_spec(std::string_view json_text);
// A model as canonical JSON (as job_spec_to_json writes its "model" field).
std::string model_spec_to_json(const ModelSpec& model);

// The spec as canonical JSON (every field, defaults filled in, except the window options of conv2d
// and maxpool2d: strides, padding and pool_size appear only where they differ from their defaults,
// so a spec written before they existed keeps its canonical text): what the coordinator stores and
// what a worker receives, so every process runs exactly the same job.
std::string job_spec_to_json(const JobSpec& spec);

}  // namespace pstrain
