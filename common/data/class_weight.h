// The job spec's `training.class_weight` (Keras' fit(class_weight=...)): how much each class's
// examples weigh in the training loss.
//
//   "balanced"              scikit-learn's compute_class_weight("balanced"): w_c = n / (k n_c) over
//                           the n examples the job trains on (after the validation hold-out), k
//                           classes, n_c of class c (a class with no training example: 1; it
//                           never weighs anything)
//   {"yes": 4, "no": 1}     by class name (a table's string labels) or index ("0", "1", ...);
//                           classes not named weigh 1
//   [1, 4]                  one weight per class index: the resolved form
//
// The spec a user submits keeps what they wrote; when a job starts, the coordinator (and
// pstrain-train) resolves it against the training examples to the list form, which is what the
// workers, servers and the model file's spec receive, so every process computes the same loss
// without counting anything itself. Weights are finite and >= 0. The loss is weighted, the
// evaluations are not (nn/loss.h LossWeights).
//
// Thread rules: pure functions.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "common/engine/model_spec.h"

namespace pstrain {

struct Split;

struct ClassWeightSpec {
  enum class Kind { kNone, kBalanced, kByClass, kList };
  Kind kind = Kind::kNone;
  std::vector<std::pair<std::string, double>> by_class;  // kByClass: name or index, weight; spec order
  std::vector<float> list;                               // kList: one per class index
};

// The submit-time checks against the dataset's labels (SpecError naming /training/class_weight or
// the key): class labels only (a one-logit binary or softmax loss), known class names or indices,
// a list of one weight per class. `class_names`: the table's string labels (empty: indices).
void check_class_weight(const ClassWeightSpec& spec, const LossSpec& loss, const std::string& dataset,
                        uint32_t num_classes, uint32_t target_width, const std::vector<std::string>& class_names);

// The weights by class index for training on `train` (its labels, and its table's class names
// when it has some); empty for kNone. Throws SpecError as check_class_weight.
std::vector<float> resolve_class_weights(const ClassWeightSpec& spec, const LossSpec& loss, const Split& train);

}  // namespace pstrain
