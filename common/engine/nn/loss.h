// The losses (model_spec.h's LossSpec) from a model's outputs, and accuracy, on integer labels.
//
//   sparse / categorical cross-entropy, K outputs z, target y (one-hot, or smoothed:
//   y_k = (1 - s) [k = label] + s / K):  loss = logsumexp(z) - sum_k y_k z_k,
//   d loss / d z_k = softmax(z)_k - y_k; correct when the largest output is the label.
//   binary cross-entropy, one output z (a logit), label in {0, 1} smoothed to t = y (1 - s) + s / 2:
//   loss = max(z, 0) - z t + log(1 + e^-|z|) (stable for any z), d loss / d z = sigmoid(z) - t;
//   correct when (z > 0) == (label = 1), Keras' 0.5 threshold on the probability.
// All numerically stable (log-sum-exp around the column maximum).
#pragma once

#include <cstdint>

#include "common/engine/model_spec.h"
#include "common/engine/nn/matrix.h"

namespace pstrain::nn {

struct LossResult {
  double loss_sum = 0;   // summed over the batch (not averaged: docs/DESIGN-NOTES.md "Loss scaling")
  int64_t correct = 0;   // examples whose prediction is the label
};

// outputs: the model's outputs x batch. If doutputs is non-null it receives
// d(loss_sum)/d(outputs).
template <typename T>
LossResult compute_loss(const LossSpec& loss, ConstMatMap<T> outputs, const int32_t* labels, T* doutputs);

// Sparse softmax cross-entropy (compute_loss with the default LossSpec).
template <typename T>
LossResult softmax_cross_entropy(ConstMatMap<T> logits, const int32_t* labels, T* dlogits);

// The classes a model's outputs are scored on (binary: 2, else one per output).
inline int64_t loss_classes(const LossSpec& loss, int64_t outputs) {
  return loss.type == LossType::kBinaryCrossEntropy ? 2 : outputs;
}

// One example's class probabilities (loss_classes of them) from its outputs: softmax, or for
// binary [1 - p, p] with p = sigmoid(z). Returns the predicted class (the most probable; binary:
// p > 0.5, ties to the lower class).
int64_t class_probabilities(const LossSpec& loss, const float* outputs, int64_t count, double* probabilities);

}  // namespace pstrain::nn
