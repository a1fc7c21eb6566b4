#include "common/engine/nn/normalization.h"

#include <algorithm>
#include <cmath>

namespace pstrain::nn {

template <typename T>
LayerNorm<T>::LayerNorm(int64_t size, int64_t last_axis, float epsilon, int64_t gamma_offset, int64_t beta_offset,
                        int64_t max_batch)
    : last_axis_(last_axis), epsilon_(static_cast<T>(epsilon)), gamma_(gamma_offset), beta_(beta_offset) {
  const auto groups = static_cast<size_t>(size / last_axis * max_batch);
  mean_.resize(groups);
  rstd_.resize(groups);
}

template <typename T>
void LayerNorm<T>::forward(const T* params, ConstMatMap<T> in, MatMap<T> out) {
  const int64_t c = last_axis_;
  const int64_t groups = in.size() / c;
  const T* gamma = gamma_ >= 0 ? params + gamma_ : nullptr;
  const T* beta = beta_ >= 0 ? params + beta_ : nullptr;
  // The statistics are summed in double, in order: a float sum over a wide axis (a bag of 20,000
  // words) drifts by 1e-4 of the result; the same operations on every CPU.
  const double inv_c = 1.0 / static_cast<double>(c);
  for (int64_t g = 0; g < groups; ++g) {
    const T* x = in.data() + g * c;
    T* y = out.data() + g * c;
    double sum = 0;
    for (int64_t k = 0; k < c; ++k) sum += static_cast<double>(x[k]);
    const double mean_wide = sum * inv_c;
    double squares = 0;
    for (int64_t k = 0; k < c; ++k) squares += (static_cast<double>(x[k]) - mean_wide) * (static_cast<double>(x[k]) - mean_wide);
    const T mean = static_cast<T>(mean_wide);
    const T rstd = static_cast<T>(1.0 / std::sqrt(squares * inv_c + static_cast<double>(epsilon_)));
    mean_[static_cast<size_t>(g)] = mean;
    rstd_[static_cast<size_t>(g)] = rstd;
    for (int64_t k = 0; k < c; ++k) {
      T v = (x[k] - mean) * rstd;
      if (gamma != nullptr) v *= gamma[k];
      if (beta != nullptr) v += beta[k];
      y[k] = v;
    }
  }
}

template <typename T>
void LayerNorm<T>::backward(const T* params, ConstMatMap<T> in, ConstMatMap<T>, MatMap<T> dout, T* grads, T* din) {
  const int64_t c = last_axis_;
  const int64_t groups = in.size() / c;
  const T* gamma = gamma_ >= 0 ? params + gamma_ : nullptr;
  T* dgamma = gamma_ >= 0 ? grads + gamma_ : nullptr;
  T* dbeta = beta_ >= 0 ? grads + beta_ : nullptr;
  if (dgamma != nullptr) std::fill_n(dgamma, c, T(0));
  if (dbeta != nullptr) std::fill_n(dbeta, c, T(0));
  const double inv_c = 1.0 / static_cast<double>(c);
  for (int64_t g = 0; g < groups; ++g) {  // examples, then positions, in order
    const T* x = in.data() + g * c;
    const T* dy = dout.data() + g * c;
    const T mean = mean_[static_cast<size_t>(g)], rstd = rstd_[static_cast<size_t>(g)];
    double sum_dxhat = 0, sum_dxhat_xhat = 0;  // (in double, as the forward's statistics)
    for (int64_t k = 0; k < c; ++k) {
      const T xhat = (x[k] - mean) * rstd;
      if (dgamma != nullptr) dgamma[k] += dy[k] * xhat;
      if (dbeta != nullptr) dbeta[k] += dy[k];
      const T dxhat = gamma != nullptr ? dy[k] * gamma[k] : dy[k];
      sum_dxhat += dxhat;
      sum_dxhat_xhat += static_cast<double>(dxhat) * static_cast<double>(xhat);
    }
    if (din == nullptr) continue;
    T* dx = din + g * c;
    const T mean_dxhat = static_cast<T>(sum_dxhat * inv_c), mean_dxhat_xhat = static_cast<T>(sum_dxhat_xhat * inv_c);
    for (int64_t k = 0; k < c; ++k) {
      const T xhat = (x[k] - mean) * rstd;
      const T dxhat = gamma != nullptr ? dy[k] * gamma[k] : dy[k];
      dx[k] = rstd * (dxhat - mean_dxhat - xhat * mean_dxhat_xhat);
    }
  }
}

template class LayerNorm<float>;
template class LayerNorm<double>;

}  // namespace pstrain::nn
