// The losses (model_spec.h's LossSpec) from a model's outputs against a batch's targets, with
// the figures the metrics are made of (accuracy for classes; absolute and squared errors and the
// targets' sums for regression).
//
// Targets are floats, target_size(loss, outputs) per example, example after example: the class
// index (exact in a float: classes < 2^24) under the class losses, one value per output under
// the regression losses.
//
//   sparse / categorical cross-entropy, K outputs z, target y (one-hot, or smoothed:
//   y_k = (1 - s) [k = label] + s / K):  loss = logsumexp(z) - sum_k y_k z_k,
//   d loss / d z_k = softmax(z)_k - y_k; correct when the largest output is the label.
//   binary cross-entropy, one output z (a logit), label in {0, 1} smoothed to t = y (1 - s) + s / 2:
//   loss = max(z, 0) - z t + log(1 + e^-|z|) (stable for any z), d loss / d z = sigmoid(z) - t;
//   correct when (z > 0) == (label = 1), Keras' 0.5 threshold on the probability.
//   regression, K outputs z, targets y, e = z - y:  mean_squared_error (1/K) sum e^2, gradient
//   2 e / K; mean_absolute_error (1/K) sum |e|, gradient sign(e) / K (0 at e = 0, TensorFlow's
//   sign); huber (1/K) sum h(e), h = e^2 / 2 for |e| <= delta else delta (|e| - delta / 2),
//   gradient clip(e, -delta, delta) / K.
// All numerically stable (log-sum-exp around the column maximum).
#pragma once

#include <array>
#include <cstdint>

#include "common/engine/model_spec.h"
#include "common/engine/nn/matrix.h"

namespace pstrain::nn {

// Sums over regression targets that add up across batches and workers into the metrics.
struct RegressionSums {
  double values = 0;        // target values scored (examples x outputs)
  double abs_error = 0;     // sum |z - y|
  double squared_error = 0; // sum (z - y)^2
  double target = 0;        // sum y
  double target_squared = 0;  // sum y^2
  RegressionSums& operator+=(const RegressionSums& o) {
    values += o.values;
    abs_error += o.abs_error;
    squared_error += o.squared_error;
    target += o.target;
    target_squared += o.target_squared;
    return *this;
  }
  double mae() const { return values > 0 ? abs_error / values : 0.0; }
  double rmse() const;
  // 1 - SSE / SST over all target values pooled; 0 when the targets do not vary.
  double r2() const;
};

// Binary classification: the examples' predicted probabilities in kAucThresholds buckets, for the
// positive and the negative examples, from which Keras' AUC (its default: 200 thresholds evenly
// spaced in [0, 1], ROC, trapezoidal interpolation) is computed; counts add across batches and
// workers, so the AUC of a distributed evaluation is the one-process figure exactly.
inline constexpr int kAucThresholds = 200;
struct BinaryScores {
  // bucket[j]: examples whose probability exceeds exactly j of the thresholds.
  std::array<double, kAucThresholds + 1> positives{}, negatives{};
  BinaryScores& operator+=(const BinaryScores& o) {
    for (size_t j = 0; j < positives.size(); ++j) {
      positives[j] += o.positives[j];
      negatives[j] += o.negatives[j];
    }
    return *this;
  }
  void add(double probability, bool positive);
  double auc() const;  // 0 when either class has no example
};

// Classes beyond this many get a top-k accuracy (Keras' sparse_top_k_categorical_accuracy, k 5).
inline constexpr int kTopK = 5;

struct LossResult {
  double loss_sum = 0;   // summed over the batch (not averaged: docs/DESIGN-NOTES.md "Loss scaling")
  int64_t correct = 0;   // examples whose prediction is the label (class losses)
  // Softmax losses: examples whose label is among the kTopK largest outputs (ties to the lower
  // class, as the argmax).
  int64_t top_k_correct = 0;
  BinaryScores binary;   // binary cross-entropy: the probabilities' buckets (AUC)
  // Regression: over every target value (examples x outputs) of the batch, the sums the metrics
  // are made of (MAE = abs / n, RMSE = sqrt(squared / n), R^2 = 1 - squared / (y2 - y^2 / n)).
  RegressionSums regression;

  LossResult& operator+=(const LossResult& other);
};

// Whether compute_loss weighs each example by its class (LossSpec::class_weights): training does,
// evaluation does not (Keras' evaluate has no class_weight).
enum class LossWeights { kApply, kIgnore };

// outputs: the model's outputs x batch. If doutputs is non-null it receives
// d(loss_sum)/d(outputs). With class weights applied, an example of class c adds w_c times its
// loss term to loss_sum and w_c times its gradient; the metrics' counts are never weighted.
// `targets`: target_size(loss, outputs.rows()) per example (see above). A class target outside
// the outputs' classes throws Error.
template <typename T>
LossResult compute_loss(const LossSpec& loss, ConstMatMap<T> outputs, const float* targets, T* doutputs,
                        LossWeights weights = LossWeights::kApply);

// The classes a model's outputs are scored on (binary: 2, else one per output).
inline int64_t loss_classes(const LossSpec& loss, int64_t outputs) {
  return loss.type == LossType::kBinaryCrossEntropy ? 2 : outputs;
}

// One example's class probabilities (loss_classes of them) from its outputs: softmax, or for
// binary [1 - p, p] with p = sigmoid(z). Returns the predicted class (the most probable; binary:
// p > 0.5, ties to the lower class).
int64_t class_probabilities(const LossSpec& loss, const float* outputs, int64_t count, double* probabilities);

}  // namespace pstrain::nn
