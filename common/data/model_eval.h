// Using a model: predictions (as JSON) and evaluation on a split: loss, accuracy, per-class accuracy and the confusion matrix,
// computed the way a job evaluates (Split::gather, the engine's forward pass, its cross-entropy),
// so the coordinator's model service and the standalone trainer give the same figures.
//
// Thread rules: uses `model`'s buffers: one thread at a time per model.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/data/dataset.h"
#include "common/engine/nn/model.h"

namespace pstrain {

struct Evaluation {
  uint64_t examples = 0;
  double loss = 0;      // mean loss per example
  double accuracy = 0;  // classification
  std::vector<std::vector<uint64_t>> confusion;  // [true class][predicted class] (classification)
  bool regression = false;
  nn::RegressionSums sums;  // regression: MAE, RMSE, R^2 come from these
  bool binary_task = false;    // binary cross-entropy (a multi-label model has no confusion matrix)
  uint64_t top_k_correct = 0;  // softmax losses: the label among the nn::kTopK largest outputs
  nn::BinaryScores binary;     // binary cross-entropy: the AUC's buckets
};

// `params` laid out by model.layout(); batches of at most model.max_batch() examples.
Evaluation evaluate_model(nn::Model<float>& model, const float* params, const Split& split);

// {"examples", "loss", "accuracy", "per_class_accuracy" (null for a class with no example),
// "confusion_matrix", "top5_accuracy" (more than 5 classes), "auc" (binary: Keras' AUC)}, or for regression {"examples", "loss", "mae", "rmse", "r2"}, plus `extra`
// fields first (already JSON: "\"model\":\"job-1\",").
std::string evaluation_json(const Evaluation& e, const std::string& extra = "");

// Runs `n` examples (`inputs`: model.input_size() values each, one after another, as the model
// sees them) through the model, model.max_batch() at a time: {"predictions": [{"class": k,
// "probabilities": [the class probabilities: softmax, or [1 - p, p] under binary cross-entropy]},
// ...]}, TensorFlow Serving's answer form; under a regression loss {"predictions": [{"values":
// [the outputs]}, ...]}; under binary cross-entropy with several outputs (multi-label)
// {"predictions": [{"labels": [0 or 1 per output], "probabilities": [sigmoid per output]}, ...]}.
// With `class_names` (a table's named classes or a class-folder dataset's, one per class), a class
// prediction names its class
// and gives the probabilities by name: {"class": "yes", "probabilities": {"no": 0.81, "yes": 0.19}}.
// `table`: a table model's answer, whose single regression target is {"value": v}.
std::string predictions_json(nn::Model<float>& model, const float* params, const float* inputs, size_t n,
                             const std::vector<std::string>& class_names = {}, bool table = false);

}  // namespace pstrain
