#include "common/engine/nn/loss.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "common/base/error.h"

namespace pstrain::nn {
namespace {

// The class index a float target holds, checked against the classes scored.
int64_t class_of(float target, int64_t classes) {
  // Range first: converting a float beyond int64 (or NaN) is undefined.
  const bool in_range = target >= 0.0f && target < static_cast<float>(classes);
  const int64_t label = in_range ? static_cast<int64_t>(target) : -1;
  if (!in_range || static_cast<float>(label) != target) {
    throw Error("label " + std::to_string(target) + " is not a class of the model's " + std::to_string(classes));
  }
  return label;
}

// Cross-entropy of a softmax against the label's (smoothed) one-hot target.
template <typename T>
LossResult softmax_loss(ConstMatMap<T> logits, const float* labels, T smoothing, T* dlogits, const float* class_weights) {
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
    const int64_t label = class_of(labels[b], classes);
    T target_dot = z[label] - max;
    if (smoothing != T(0)) {
      target_dot *= on;
      for (int64_t k = 0; k < classes; ++k) {
        if (k != label) target_dot += off * (z[k] - max);
      }
    }
    const T weight = class_weights == nullptr ? T(1) : static_cast<T>(class_weights[label]);
    result.loss_sum += static_cast<double>(class_weights == nullptr ? log_sum - target_dot : weight * (log_sum - target_dot));
    result.correct += best == label ? 1 : 0;
    // Top k: fewer than k outputs rank above the label's (a tie ranks the lower class first).
    int64_t above = 0;
    for (int64_t k = 0; k < classes && above < kTopK; ++k) {
      if (z[k] > z[label] || (z[k] == z[label] && k < label)) ++above;
    }
    result.top_k_correct += above < kTopK ? 1 : 0;
    if (dlogits != nullptr) {
      T* d = dlogits + b * classes;
      const T inv_sum = T(1) / sum;
      for (int64_t k = 0; k < classes; ++k) d[k] = std::exp(z[k] - max) * inv_sum - (smoothing != T(0) ? off : T(0));
      d[label] -= smoothing != T(0) ? on - off : T(1);
      if (class_weights != nullptr) {
        for (int64_t k = 0; k < classes; ++k) d[k] *= weight;
      }
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

// One logit per label (K of them: multi-label when K > 1), labels in [0, 1]. An example is
// correct when every label is (z > 0 where the label is above 1/2): subset accuracy, which is
// Keras' binary accuracy for one label. AUC pools every label (Keras' AUC, multi_label false).
// Class weights (one logit only: class labels 0 and 1) weigh the example by its label's class.
template <typename T>
LossResult binary_loss(ConstMatMap<T> logits, const float* labels, T smoothing, T* dlogits, const float* class_weights) {
  LossResult result;
  const int64_t k = logits.rows();
  for (int64_t b = 0; b < logits.cols(); ++b) {
    bool all = true;
    T example = 0;
    for (int64_t i = 0; i < k; ++i) {
      const T z = logits(i, b);
      const float y = labels[b * k + i];
      if (!(y >= 0.0f && y <= 1.0f)) {
        throw Error("binary label " + std::to_string(y) + " is outside [0, 1]");
      }
      const T t = static_cast<T>(y) * (T(1) - smoothing) + smoothing / T(2);
      example += std::max(z, T(0)) - z * t + std::log1p(std::exp(-std::abs(z)));
      const bool positive = y > 0.5f;
      all = all && (z > T(0)) == positive;
      result.binary.add(static_cast<double>(sigmoid(z)), positive);
      if (dlogits != nullptr) dlogits[b * k + i] = sigmoid(z) - t;
    }
    if (class_weights != nullptr) {  // one logit (job spec checks)
      const T weight = static_cast<T>(class_weights[labels[b] > 0.5f ? 1 : 0]);
      example *= weight;
      if (dlogits != nullptr) dlogits[b] *= weight;
    }
    result.loss_sum += static_cast<double>(k == 1 ? example : example / static_cast<T>(k));
    if (dlogits != nullptr && k > 1) {
      for (int64_t i = 0; i < k; ++i) dlogits[b * k + i] /= static_cast<T>(k);
    }
    result.correct += all ? 1 : 0;
  }
  return result;
}

// The regression losses: per target value e = z - y, the value and derivative of the loss's
// element function, averaged over the outputs (Keras' mean over the last axis).
template <typename T>
LossResult regression_loss(const LossSpec& loss, ConstMatMap<T> outputs, const float* targets, T* doutputs) {
  LossResult result;
  RegressionSums& sums = result.regression;
  const int64_t k = outputs.rows();
  const T inv_k = T(1) / static_cast<T>(k);
  const T delta = static_cast<T>(loss.delta);
  for (int64_t b = 0; b < outputs.cols(); ++b) {
    const T* z = outputs.data() + b * k;
    const float* y = targets + b * k;
    T* d = doutputs == nullptr ? nullptr : doutputs + b * k;
    T example = 0;
    for (int64_t i = 0; i < k; ++i) {
      const T target = static_cast<T>(y[i]);
      const T e = z[i] - target;
      const T a = std::abs(e);
      T value, slope;
      switch (loss.type) {
        case LossType::kMeanAbsoluteError:
          value = a;
          slope = e > T(0) ? T(1) : e < T(0) ? T(-1) : T(0);
          break;
        case LossType::kHuber:
          value = a <= delta ? T(0.5) * e * e : delta * (a - T(0.5) * delta);
          slope = std::clamp(e, -delta, delta);
          break;
        default:  // mean squared error
          value = e * e;
          slope = T(2) * e;
          break;
      }
      example += value;
      if (d != nullptr) d[i] = slope * inv_k;
      sums.abs_error += static_cast<double>(a);
      sums.squared_error += static_cast<double>(e) * static_cast<double>(e);
      sums.target += static_cast<double>(target);
      sums.target_squared += static_cast<double>(target) * static_cast<double>(target);
    }
    result.loss_sum += static_cast<double>(example * inv_k);
  }
  sums.values += static_cast<double>(k * outputs.cols());
  return result;
}

}  // namespace

void BinaryScores::add(double probability, bool positive) {
  // Keras' thresholds: t_0 = -eps, t_i = i / (n - 1) for 0 < i < n - 1, t_(n-1) = 1 + eps. A
  // probability exceeds t_0 always, t_(n-1) never, and t_i when p > i / (n - 1): m = 1 +
  // (ceil(p (n - 1)) - 1) thresholds in all, kept as bucket m.
  constexpr int n = kAucThresholds;
  const double p = std::clamp(std::isnan(probability) ? 0.0 : probability, 0.0, 1.0);
  const int inner = std::clamp(static_cast<int>(std::ceil(p * (n - 1))) - 1, 0, n - 2);
  (positive ? positives : negatives)[static_cast<size_t>(1 + inner)] += 1;
}

double BinaryScores::auc() const {
  constexpr int n = kAucThresholds;
  double p = 0, q = 0;
  for (size_t j = 0; j < positives.size(); ++j) {
    p += positives[j];
    q += negatives[j];
  }
  if (p == 0 || q == 0) return 0.0;
  // tp[i], fp[i]: examples above threshold i = those in buckets j > i.
  double tp_above = p, fp_above = q;  // threshold 0 (-eps): every example
  double area = 0, tpr_prev = 1, fpr_prev = 1;
  for (int i = 1; i < n; ++i) {
    tp_above -= positives[static_cast<size_t>(i)];
    fp_above -= negatives[static_cast<size_t>(i)];
    const double tpr = tp_above / p, fpr = fp_above / q;
    area += (fpr_prev - fpr) * (tpr_prev + tpr) / 2;
    tpr_prev = tpr;
    fpr_prev = fpr;
  }
  return area;  // the last threshold (1 + eps) ends at tpr = fpr = 0
}

double RegressionSums::rmse() const { return values > 0 ? std::sqrt(squared_error / values) : 0.0; }

double RegressionSums::r2() const {
  if (values <= 0) return 0.0;
  const double total = target_squared - target * target / values;
  return total > 0 ? 1.0 - squared_error / total : 0.0;
}

LossResult& LossResult::operator+=(const LossResult& other) {
  loss_sum += other.loss_sum;
  correct += other.correct;
  top_k_correct += other.top_k_correct;
  regression += other.regression;
  binary += other.binary;
  return *this;
}

template <typename T>
LossResult compute_loss(const LossSpec& loss, ConstMatMap<T> outputs, const float* targets, T* doutputs,
                        LossWeights weights) {
  const T smoothing = static_cast<T>(loss.label_smoothing);
  const int64_t classes = loss_classes(loss, outputs.rows());
  const float* w = nullptr;
  if (weights == LossWeights::kApply && !loss.class_weights.empty()) {
    if (static_cast<int64_t>(loss.class_weights.size()) != classes || (loss.type == LossType::kBinaryCrossEntropy && outputs.rows() != 1)) {
      throw Error(std::to_string(loss.class_weights.size()) + " class weights for a model scoring " +
                  std::to_string(classes) + " classes");
    }
    w = loss.class_weights.data();
  }
  switch (loss.type) {
    case LossType::kSparseCategoricalCrossEntropy: return softmax_loss<T>(outputs, targets, T(0), doutputs, w);
    case LossType::kCategoricalCrossEntropy: return softmax_loss<T>(outputs, targets, smoothing, doutputs, w);
    case LossType::kBinaryCrossEntropy: return binary_loss<T>(outputs, targets, smoothing, doutputs, w);
    case LossType::kMeanSquaredError:
    case LossType::kMeanAbsoluteError:
    case LossType::kHuber: return regression_loss<T>(loss, outputs, targets, doutputs);
  }
  return {};
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

template LossResult compute_loss<float>(const LossSpec&, ConstMatMap<float>, const float*, float*, LossWeights);
template LossResult compute_loss<double>(const LossSpec&, ConstMatMap<double>, const float*, double*, LossWeights);

}  // namespace pstrain::nn
