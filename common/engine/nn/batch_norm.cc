#include "common/engine/nn/batch_norm.h"

#include <algorithm>
#include <cmath>
#include <type_traits>

#include "common/engine/simd/kernels.h"

namespace pstrain::nn {
namespace {

// The passes of simd::KernelTable's batch normalization (kernels.h has their formulas), in
// scalar form for T = double; float takes the active level's kernels.
template <typename T>
struct Passes {
  void (*channel_sums)(int64_t rows, int64_t c, const T* x, T* sums);
  void (*channel_square_sums)(int64_t rows, int64_t c, const T* x, const T* mean, T* sums);
  void (*normalize)(int64_t rows, int64_t c, const T* x, const T* mean, const T* rstd, const T* gamma,
                    const T* beta, bool relu, T* y);
  void (*backward_sums)(int64_t rows, int64_t c, const T* x, const T* dy, const T* y, const T* mean,
                        const T* rstd, const T* gamma, T* dgamma, T* dbeta, T* sum_dxhat, T* sum_dxhat_xhat);
  void (*backward)(int64_t rows, int64_t c, const T* x, const T* dy, const T* y, const T* mean, const T* rstd,
                   const T* gamma, const T* mean_dxhat, const T* mean_dxhat_xhat, T* dx);
};

template <typename T>
void channel_sums(int64_t rows, int64_t c, const T* x, T* sums) {
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t k = 0; k < c; ++k) sums[k] += x[r * c + k];
  }
}

template <typename T>
void channel_square_sums(int64_t rows, int64_t c, const T* x, const T* mean, T* sums) {
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t k = 0; k < c; ++k) sums[k] += (x[r * c + k] - mean[k]) * (x[r * c + k] - mean[k]);
  }
}

template <typename T>
void normalize(int64_t rows, int64_t c, const T* x, const T* mean, const T* rstd, const T* gamma, const T* beta,
               bool relu, T* y) {
  for (int64_t i = 0; i < rows * c; ++i) {
    const int64_t k = i % c;
    const T v = (x[i] - mean[k]) * rstd[k] * gamma[k] + beta[k];
    y[i] = relu && !(v > T(0)) ? T(0) : v;
  }
}

template <typename T>
T masked(const T* dy, const T* y, int64_t i) {
  return y != nullptr && !(y[i] > T(0)) ? T(0) : dy[i];
}

template <typename T>
void backward_sums(int64_t rows, int64_t c, const T* x, const T* dy, const T* y, const T* mean, const T* rstd,
                   const T* gamma, T* dgamma, T* dbeta, T* sum_dxhat, T* sum_dxhat_xhat) {
  for (int64_t i = 0; i < rows * c; ++i) {
    const int64_t k = i % c;
    const T g = masked(dy, y, i);
    const T xhat = (x[i] - mean[k]) * rstd[k];
    const T dxhat = g * gamma[k];
    dgamma[k] += g * xhat;
    dbeta[k] += g;
    sum_dxhat[k] += dxhat;
    sum_dxhat_xhat[k] += dxhat * xhat;
  }
}

template <typename T>
void backward(int64_t rows, int64_t c, const T* x, const T* dy, const T* y, const T* mean, const T* rstd,
              const T* gamma, const T* mean_dxhat, const T* mean_dxhat_xhat, T* dx) {
  for (int64_t i = 0; i < rows * c; ++i) {
    const int64_t k = i % c;
    const T xhat = (x[i] - mean[k]) * rstd[k];
    dx[i] = rstd[k] * (masked(dy, y, i) * gamma[k] - mean_dxhat[k] - xhat * mean_dxhat_xhat[k]);
  }
}

template <typename T>
Passes<T> passes() {
  if constexpr (std::is_same_v<T, float>) {
    const simd::KernelTable& k = simd::kernels();
    return {k.channel_sums, k.channel_square_sums, k.normalize, k.normalize_backward_sums, k.normalize_backward};
  } else {
    return {channel_sums<T>, channel_square_sums<T>, normalize<T>, backward_sums<T>, backward<T>};
  }
}

}  // namespace

template <typename T>
BatchNorm<T>::BatchNorm(int64_t, int64_t channels, int64_t ghost, float epsilon, Offsets offsets, int64_t max_batch)
    : channels_(channels), ghost_(ghost), epsilon_(static_cast<T>(epsilon)), at_(offsets) {
  const auto slots = static_cast<size_t>((max_batch + ghost - 1) / ghost * channels);
  const auto c = static_cast<size_t>(channels);
  mean_.resize(slots);
  var_.resize(slots);
  rstd_.resize(slots);
  sum_dxhat_.resize(c);
  sum_dxhat_xhat_.resize(c);
  ones_.assign(c, T(1));
  zeros_.assign(c, T(0));
  unused_dgamma_.resize(c);
  unused_dbeta_.resize(c);
  moving_rstd_.resize(c);
}

template <typename T>
void BatchNorm<T>::forward(const T* params, ConstMatMap<T> in, MatMap<T> out) {
  const Passes<T> pass = passes<T>();
  const int64_t c = channels_, size = in.rows(), batch = in.cols();
  const int64_t positions = size / c;
  const T* gamma = at_.gamma >= 0 ? params + at_.gamma : ones_.data();
  const T* beta = at_.beta >= 0 ? params + at_.beta : zeros_.data();
  if (!training_) {
    const T* mv = params + at_.moving_variance;
    for (int64_t k = 0; k < c; ++k) moving_rstd_[static_cast<size_t>(k)] = T(1) / std::sqrt(mv[k] + epsilon_);
    pass.normalize(batch * positions, c, in.data(), params + at_.moving_mean, moving_rstd_.data(), gamma, beta, relu_,
                   out.data());
    return;
  }
  for (int64_t g = 0, first = 0; first < batch; ++g, first += ghost_) {
    const int64_t end = std::min(batch, first + ghost_);
    const int64_t rows = (end - first) * positions;  // examples, then positions, in order
    const T inv_m = T(1) / static_cast<T>(rows);
    const T* x = in.data() + first * size;
    T* mean = mean_.data() + g * c;
    T* var = var_.data() + g * c;
    T* rstd = rstd_.data() + g * c;
    std::fill_n(mean, c, T(0));
    std::fill_n(var, c, T(0));
    pass.channel_sums(rows, c, x, mean);
    for (int64_t k = 0; k < c; ++k) mean[k] *= inv_m;
    pass.channel_square_sums(rows, c, x, mean, var);
    for (int64_t k = 0; k < c; ++k) {
      var[k] *= inv_m;
      rstd[k] = T(1) / std::sqrt(var[k] + epsilon_);
    }
    pass.normalize(rows, c, x, mean, rstd, gamma, beta, relu_, out.data() + first * size);
  }
}

template <typename T>
void BatchNorm<T>::backward(const T* params, ConstMatMap<T> in, ConstMatMap<T> out, MatMap<T> dout, T* grads, T* din) {
  const Passes<T> pass = passes<T>();
  const int64_t c = channels_, size = in.rows(), batch = in.cols();
  const int64_t positions = size / c;
  const T* gamma = at_.gamma >= 0 ? params + at_.gamma : ones_.data();
  T* dgamma = at_.gamma >= 0 ? grads + at_.gamma : unused_dgamma_.data();
  T* dbeta = at_.beta >= 0 ? grads + at_.beta : unused_dbeta_.data();
  T* dmean = grads + at_.moving_mean;
  T* dvar = grads + at_.moving_variance;
  std::fill_n(dgamma, c, T(0));
  std::fill_n(dbeta, c, T(0));
  std::fill_n(dmean, c, T(0));
  std::fill_n(dvar, c, T(0));
  for (int64_t g = 0, first = 0; first < batch; ++g, first += ghost_) {
    const int64_t end = std::min(batch, first + ghost_);
    const auto examples = static_cast<T>(end - first);
    const int64_t rows = (end - first) * positions;
    const T inv_m = T(1) / static_cast<T>(rows);
    const T* mean = mean_.data() + g * c;
    const T* rstd = rstd_.data() + g * c;
    // The moving statistics' share: this ghost batch's statistics times its examples.
    for (int64_t k = 0; k < c; ++k) {
      dmean[k] += examples * mean[k];
      dvar[k] += examples * var_[static_cast<size_t>(g * c + k)];
    }
    const int64_t at = first * size;
    const T* y = relu_ ? out.data() + at : nullptr;  // the fused ReLU's mask
    std::fill(sum_dxhat_.begin(), sum_dxhat_.end(), T(0));
    std::fill(sum_dxhat_xhat_.begin(), sum_dxhat_xhat_.end(), T(0));
    pass.backward_sums(rows, c, in.data() + at, dout.data() + at, y, mean, rstd, gamma, dgamma, dbeta,
                       sum_dxhat_.data(), sum_dxhat_xhat_.data());
    if (din == nullptr) continue;
    for (int64_t k = 0; k < c; ++k) {
      sum_dxhat_[static_cast<size_t>(k)] *= inv_m;
      sum_dxhat_xhat_[static_cast<size_t>(k)] *= inv_m;
    }
    pass.backward(rows, c, in.data() + at, dout.data() + at, y, mean, rstd, gamma, sum_dxhat_.data(),
                  sum_dxhat_xhat_.data(), din + at);
  }
}

template class BatchNorm<float>;
template class BatchNorm<double>;

}  // namespace pstrain::nn
