// An optimizer's settings as the job spec gives them (`optimizer` in the spec; parsed in
// common/data/job_spec_json.cc). Here, not in the job spec's header, so that the engine does not
// depend on the data library.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

namespace pstrain {

enum class OptimizerType { kSgd, kAdam, kAdagrad, kRmsprop, kAdamW };

// A learning-rate schedule, Keras' (keras.optimizers.schedules), of the optimizer's step (its
// iterations before the update: 0 for the first). Formulas in schedule.h.
struct LearningRateSchedule {
  enum class Kind { kConstant, kExponentialDecay, kPiecewiseConstant, kCosineDecay };
  Kind kind = Kind::kConstant;
  double initial_learning_rate = 0;  // exponential_decay, cosine_decay
  int64_t decay_steps = 0;           // exponential_decay, cosine_decay
  double decay_rate = 0;             // exponential_decay
  bool staircase = false;            // exponential_decay
  std::vector<int64_t> boundaries;   // piecewise_constant: ascending
  std::vector<double> values;        // piecewise_constant: one more than boundaries
  double alpha = 0;                  // cosine_decay: the floor, as a fraction of the rate
  int64_t warmup_steps = 0;          // cosine_decay
  std::optional<double> warmup_target;  // cosine_decay: the rate warm-up reaches
};

const char* schedule_kind_name(LearningRateSchedule::Kind kind);

const char* optimizer_type_name(OptimizerType type);

struct OptimizerSpec {
  OptimizerType type = OptimizerType::kAdam;
  // Keras defaults: sgd 0.01, the others 0.001. With a schedule: its rate at step 0.
  float learning_rate = 0.001f;
  LearningRateSchedule schedule;
  float beta_1 = 0.9f;           // adam
  float beta_2 = 0.999f;         // adam
  float epsilon = 1e-7f;         // adam, adamw, adagrad, rmsprop
  float momentum = 0.0f;         // sgd, rmsprop
  bool nesterov = false;         // sgd
  float initial_accumulator_value = 0.1f;  // adagrad
  float rho = 0.9f;              // rmsprop
  bool centered = false;         // rmsprop
  // Decoupled weight decay (Keras 3's `weight_decay`, every optimizer; adamw's default 0.004):
  // w -= w * weight_decay * lr before the update.
  float weight_decay = 0.0f;
  // Keras' gradient clipping, at most one of the two (0: off; nn/gradient_clipping.h): clipnorm
  // scales each tensor's gradient down to this L2 norm, global_clipnorm the whole model's. The
  // gradient clipped is the step's (summed over workers, divided by the examples, L2 added).
  float clipnorm = 0.0f;
  float global_clipnorm = 0.0f;
  bool clips() const { return clipnorm > 0.0f || global_clipnorm > 0.0f; }
  // How sparse embedding tables (docs/DESIGN-NOTES.md "Sparse models") are updated. kLazy (the
  // default): only the rows a step touched, their slots and weight decay included, with the
  // table's step count (TF's LazyAdam, PyTorch's SparseAdam). kDense: every row every step, as
  // Keras updates a dense table (refused for tables over kSparseTableDefault parameters). The
  // same for Adagrad and SGD without momentum or weight decay; not for momentum, Adam, RMSprop.
  enum class SparseUpdates { kLazy, kDense };
  SparseUpdates sparse_updates = SparseUpdates::kLazy;
};

}  // namespace pstrain
