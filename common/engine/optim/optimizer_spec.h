// An optimizer's settings as the job spec gives them (`optimizer` in the spec; parsed in
// common/data/job_spec_json.cc). Here, not in the job spec's header, so that the engine does not
// depend on the data library.
#pragma once

namespace pstrain {

enum class OptimizerType { kSgd, kAdam, kAdagrad };

const char* optimizer_type_name(OptimizerType type);

struct OptimizerSpec {
  OptimizerType type = OptimizerType::kAdam;
  float learning_rate = 0.001f;  // Keras defaults: sgd 0.01, adam 0.001, adagrad 0.001
  float beta_1 = 0.9f;           // adam
  float beta_2 = 0.999f;         // adam
  float epsilon = 1e-7f;         // adam, adagrad
  float momentum = 0.0f;         // sgd
  bool nesterov = false;         // sgd
  float initial_accumulator_value = 0.1f;  // adagrad
};

}  // namespace pstrain
