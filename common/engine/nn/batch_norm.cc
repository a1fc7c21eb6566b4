#include "common/engine/nn/batch_norm.h"

#include <algorithm>
#include <cmath>

namespace pstrain::nn {

template <typename T>
BatchNorm<T>::BatchNorm(int64_t, int64_t channels, int64_t ghost, float epsilon, Offsets offsets, int64_t max_batch)
    : channels_(channels), ghost_(ghost), epsilon_(static_cast<T>(epsilon)), at_(offsets) {
  const auto slots = static_cast<size_t>((max_batch + ghost - 1) / ghost * channels);
  mean_.resize(slots);
  var_.resize(slots);
  rstd_.resize(slots);
  sum_dxhat_.resize(static_cast<size_t>(channels));
  sum_dxhat_xhat_.resize(static_cast<size_t>(channels));
}

template <typename T>
void BatchNorm<T>::forward(const T* params, ConstMatMap<T> in, MatMap<T> out) {
  const int64_t c = channels_, size = in.rows(), batch = in.cols();
  const int64_t positions = size / c;
  const T* gamma = at_.gamma >= 0 ? params + at_.gamma : nullptr;
  const T* beta = at_.beta >= 0 ? params + at_.beta : nullptr;
  if (!training_) {
    const T* mm = params + at_.moving_mean;
    const T* mv = params + at_.moving_variance;
    for (int64_t b = 0; b < batch; ++b) {
      for (int64_t p = 0; p < positions; ++p) {
        const T* x = in.data() + b * size + p * c;
        T* y = out.data() + b * size + p * c;
        for (int64_t k = 0; k < c; ++k) {
          T v = (x[k] - mm[k]) / std::sqrt(mv[k] + epsilon_);
          if (gamma != nullptr) v *= gamma[k];
          if (beta != nullptr) v += beta[k];
          y[k] = v;
        }
      }
    }
    return;
  }
  for (int64_t g = 0, first = 0; first < batch; ++g, first += ghost_) {
    const int64_t end = std::min(batch, first + ghost_);
    const T inv_m = T(1) / static_cast<T>((end - first) * positions);
    T* mean = mean_.data() + g * c;
    T* var = var_.data() + g * c;
    T* rstd = rstd_.data() + g * c;
    std::fill_n(mean, c, T(0));
    std::fill_n(var, c, T(0));
    for (int64_t b = first; b < end; ++b) {  // examples, then positions, in order
      for (int64_t p = 0; p < positions; ++p) {
        const T* x = in.data() + b * size + p * c;
        for (int64_t k = 0; k < c; ++k) mean[k] += x[k];
      }
    }
    for (int64_t k = 0; k < c; ++k) mean[k] *= inv_m;
    for (int64_t b = first; b < end; ++b) {
      for (int64_t p = 0; p < positions; ++p) {
        const T* x = in.data() + b * size + p * c;
        for (int64_t k = 0; k < c; ++k) var[k] += (x[k] - mean[k]) * (x[k] - mean[k]);
      }
    }
    for (int64_t k = 0; k < c; ++k) {
      var[k] *= inv_m;
      rstd[k] = T(1) / std::sqrt(var[k] + epsilon_);
    }
    for (int64_t b = first; b < end; ++b) {
      for (int64_t p = 0; p < positions; ++p) {
        const T* x = in.data() + b * size + p * c;
        T* y = out.data() + b * size + p * c;
        for (int64_t k = 0; k < c; ++k) {
          T v = (x[k] - mean[k]) * rstd[k];
          if (gamma != nullptr) v *= gamma[k];
          if (beta != nullptr) v += beta[k];
          y[k] = v;
        }
      }
    }
  }
}

template <typename T>
void BatchNorm<T>::backward(const T* params, ConstMatMap<T> in, ConstMatMap<T>, MatMap<T> dout, T* grads, T* din) {
  const int64_t c = channels_, size = in.rows(), batch = in.cols();
  const int64_t positions = size / c;
  const T* gamma = at_.gamma >= 0 ? params + at_.gamma : nullptr;
  T* dgamma = at_.gamma >= 0 ? grads + at_.gamma : nullptr;
  T* dbeta = at_.beta >= 0 ? grads + at_.beta : nullptr;
  T* dmean = grads + at_.moving_mean;
  T* dvar = grads + at_.moving_variance;
  if (dgamma != nullptr) std::fill_n(dgamma, c, T(0));
  if (dbeta != nullptr) std::fill_n(dbeta, c, T(0));
  std::fill_n(dmean, c, T(0));
  std::fill_n(dvar, c, T(0));
  for (int64_t g = 0, first = 0; first < batch; ++g, first += ghost_) {
    const int64_t end = std::min(batch, first + ghost_);
    const auto examples = static_cast<T>(end - first);
    const T inv_m = T(1) / static_cast<T>((end - first) * positions);
    const T* mean = mean_.data() + g * c;
    const T* rstd = rstd_.data() + g * c;
    // The moving statistics' share: this ghost batch's statistics times its examples.
    for (int64_t k = 0; k < c; ++k) {
      dmean[k] += examples * mean[k];
      dvar[k] += examples * var_[static_cast<size_t>(g * c + k)];
    }
    std::fill(sum_dxhat_.begin(), sum_dxhat_.end(), T(0));
    std::fill(sum_dxhat_xhat_.begin(), sum_dxhat_xhat_.end(), T(0));
    for (int64_t b = first; b < end; ++b) {
      for (int64_t p = 0; p < positions; ++p) {
        const T* x = in.data() + b * size + p * c;
        const T* dy = dout.data() + b * size + p * c;
        for (int64_t k = 0; k < c; ++k) {
          const T xhat = (x[k] - mean[k]) * rstd[k];
          if (dgamma != nullptr) dgamma[k] += dy[k] * xhat;
          if (dbeta != nullptr) dbeta[k] += dy[k];
          const T dxhat = gamma != nullptr ? dy[k] * gamma[k] : dy[k];
          sum_dxhat_[static_cast<size_t>(k)] += dxhat;
          sum_dxhat_xhat_[static_cast<size_t>(k)] += dxhat * xhat;
        }
      }
    }
    if (din == nullptr) continue;
    for (int64_t b = first; b < end; ++b) {
      for (int64_t p = 0; p < positions; ++p) {
        const T* x = in.data() + b * size + p * c;
        const T* dy = dout.data() + b * size + p * c;
        T* dx = din + b * size + p * c;
        for (int64_t k = 0; k < c; ++k) {
          const T xhat = (x[k] - mean[k]) * rstd[k];
          const T dxhat = gamma != nullptr ? dy[k] * gamma[k] : dy[k];
          dx[k] = rstd[k] * (dxhat - sum_dxhat_[static_cast<size_t>(k)] * inv_m -
                             xhat * sum_dxhat_xhat_[static_cast<size_t>(k)] * inv_m);
        }
      }
    }
  }
}

template class BatchNorm<float>;
template class BatchNorm<double>;

}  // namespace pstrain::nn
