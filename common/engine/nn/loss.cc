#include "common/engine/nn/loss.h"

#include <cmath>

namespace pstrain::nn {

template <typename T>
LossResult softmax_cross_entropy(ConstMatMap<T> logits, const int32_t* labels, T* dlogits) {
  LossResult result;
  const int64_t classes = logits.rows();
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
    result.loss_sum += static_cast<double>(log_sum - (z[label] - max));
    result.correct += best == label ? 1 : 0;
    if (dlogits != nullptr) {
      T* d = dlogits + b * classes;
      const T inv_sum = T(1) / sum;
      for (int64_t k = 0; k < classes; ++k) d[k] = std::exp(z[k] - max) * inv_sum;
      d[label] -= T(1);
    }
  }
  return result;
}

template LossResult softmax_cross_entropy<float>(ConstMatMap<float>, const int32_t*, float*);
template LossResult softmax_cross_entropy<double>(ConstMatMap<double>, const int32_t*, double*);

}  // namespace pstrain::nn
