// Sparse softmax cross-entropy from logits, and accuracy.
#pragma once

#include <cstdint>

#include "common/engine/nn/matrix.h"

namespace pstrain::nn {

struct LossResult {
  double loss_sum = 0;   // summed over the batch (not averaged: docs/DESIGN-NOTES.md "Loss scaling")
  int64_t correct = 0;   // examples whose largest logit is the label
};

// logits: classes x batch. Numerically stable (log-sum-exp around the column maximum).
// If dlogits is non-null it receives d(loss_sum)/d(logits) = softmax - onehot(label).
template <typename T>
LossResult softmax_cross_entropy(ConstMatMap<T> logits, const int32_t* labels, T* dlogits);

}  // namespace pstrain::nn
