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
  const T inv_c = T(1) / static_cast<T>(c);
  for (int64_t g = 0; g < groups; ++g) {
    const T* x = in.data() + g * c;
    T* y = out.data() + g * c;
    T sum = 0;
    for (int64_t k = 0; k < c; ++k) sum += x[k];
    const T mean = sum * inv_c;
    T squares = 0;
    for (int64_t k = 0; k < c; ++k) squares += (x[k] - mean) * (x[k] - mean);
    const T rstd = T(1) / std::sqrt(squares * inv_c + epsilon_);
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
  const T inv_c = T(1) / static_cast<T>(c);
  for (int64_t g = 0; g < groups; ++g) {  // examples, then positions, in order
    const T* x = in.data() + g * c;
    const T* dy = dout.data() + g * c;
    const T mean = mean_[static_cast<size_t>(g)], rstd = rstd_[static_cast<size_t>(g)];
    T sum_dxhat = 0, sum_dxhat_xhat = 0;
    for (int64_t k = 0; k < c; ++k) {
      const T xhat = (x[k] - mean) * rstd;
      if (dgamma != nullptr) dgamma[k] += dy[k] * xhat;
      if (dbeta != nullptr) dbeta[k] += dy[k];
      const T dxhat = gamma != nullptr ? dy[k] * gamma[k] : dy[k];
      sum_dxhat += dxhat;
      sum_dxhat_xhat += dxhat * xhat;
    }
    if (din == nullptr) continue;
    T* dx = din + g * c;
    const T mean_dxhat = sum_dxhat * inv_c, mean_dxhat_xhat = sum_dxhat_xhat * inv_c;
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
