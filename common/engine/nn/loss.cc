#include "common/engine/nn/loss.h"

#include <algorithm>
#include <cmath>

namespace pstrain::nn {
namespace {

// Cross-entropy of a softmax against the label's (smoothed) one-hot target.
template <typename T>
LossResult softmax_loss(ConstMatMap<T> logits, const int32_t* labels, T smoothing, T* dlogits) {
  LossResult result;
  const int64_t classes = logits.rows();
  const T off = smoothing / static_cast<T>(classes);  // every class's share of the smoothing
  const T on = T(1) - smoothing + off;                 // the label's target
  for (int64_t b = 0; b < logits.cols(); ++b) {
    const T* z = logits.data() + b * classes;
    int64_t best = 0;
    for (int64_t k = 1; k < classes; ++k) {
      if (z[k] > z[best]) best = k;
    }
    const T max = z[best];
    T sum = 0;
    for (int64_t k = 0; k < classes; ++k) sum += std::exp(z[k] - max);
    const T log_sum = std::log(sum);
    const int32_t label = labels[b];
    T target_dot = z[label] - max;
    if (smoothing != T(0)) {
      target_dot *= on;
      for (int64_t k = 0; k < classes; ++k) {
        if (k != label) target_dot += off * (z[k] - max);
      }
    }
    result.loss_sum += static_cast<double>(log_sum - target_dot);
    result.correct += best == label ? 1 : 0;
    if (dlogits != nullptr) {
      T* d = dlogits + b * classes;
      const T inv_sum = T(1) / sum;
      for (int64_t k = 0; k < classes; ++k) d[k] = std::exp(z[k] - max) * inv_sum - (smoothing != T(0) ? off : T(0));
      d[label] -= smoothing != T(0) ? on - off : T(1);
    }
  }
  return result;
}

template <typename T>
T sigmoid(T z) {
  if (z >= 0) return T(1) / (T(1) + std::exp(-z));
  const T e = std::exp(z);
  return e / (T(1) + e);
}

template <typename T>
LossResult binary_loss(ConstMatMap<T> logits, const int32_t* labels, T smoothing, T* dlogits) {
  LossResult result;
  for (int64_t b = 0; b < logits.cols(); ++b) {
    const T z = logits(0, b);
    const T t = static_cast<T>(labels[b]) * (T(1) - smoothing) + smoothing / T(2);
    result.loss_sum += static_cast<double>(std::max(z, T(0)) - z * t + std::log1p(std::exp(-std::abs(z))));
    result.correct += (z > T(0)) == (labels[b] == 1) ? 1 : 0;
    if (dlogits != nullptr) dlogits[b] = sigmoid(z) - t;
  }
  return result;
}

}  // namespace

template <typename T>
LossResult compute_loss(const LossSpec& loss, ConstMatMap<T> outputs, const int32_t* labels, T* doutputs) {
  const T smoothing = static_cast<T>(loss.label_smoothing);
  switch (loss.type) {
    case LossType::kSparseCategoricalCrossEntropy: return softmax_loss<T>(outputs, labels, T(0), doutputs);
    case LossType::kCategoricalCrossEntropy: return softmax_loss<T>(outputs, labels, smoothing, doutputs);
    case LossType::kBinaryCrossEntropy: return binary_loss<T>(outputs, labels, smoothing, doutputs);
  }
  return {};
}

template <typename T>
LossResult softmax_cross_entropy(ConstMatMap<T> logits, const int32_t* labels, T* dlogits) {
  return softmax_loss<T>(logits, labels, T(0), dlogits);
}

int64_t class_probabilities(const LossSpec& loss, const float* outputs, int64_t count, double* probabilities) {
  if (loss.type == LossType::kBinaryCrossEntropy) {
    const double p = sigmoid(static_cast<double>(outputs[0]));
    probabilities[0] = 1.0 - p;
    probabilities[1] = p;
    return p > 0.5 ? 1 : 0;
  }
  const int64_t best = std::max_element(outputs, outputs + count) - outputs;
  double sum = 0;
  for (int64_t k = 0; k < count; ++k) sum += probabilities[k] = std::exp(static_cast<double>(outputs[k] - outputs[best]));
  for (int64_t k = 0; k < count; ++k) probabilities[k] /= sum;
  return best;
}

template LossResult compute_loss<float>(const LossSpec&, ConstMatMap<float>, const int32_t*, float*);
template LossResult compute_loss<double>(const LossSpec&, ConstMatMap<double>, const int32_t*, double*);
template LossResult softmax_cross_entropy<float>(ConstMatMap<float>, const int32_t*, float*);
template LossResult softmax_cross_entropy<double>(ConstMatMap<double>, const int32_t*, double*);

}  // namespace pstrain::nn
