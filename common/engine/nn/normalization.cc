#include "common/engine/nn/normalization.h"

#include <algorithm>
#include <cmath>

namespace pstrain::nn {

namespace {

// Groups run kBlock at a time: their sums are independent chains, each still over its own values
// in order (the same bits as one group at a time), so the double adds overlap instead of each
// waiting for the last (a 32-wide axis was bound by the adds' latency).
constexpr int64_t kBlock = 4;

template <typename T>
struct Axis {
  int64_t c;
  T epsilon;
  const T* gamma;  // nullptr without scale / center
  const T* beta;
};

// Forward of groups g0 .. g0 + N - 1 (N a constant, so the chains stay in registers).
template <int64_t N, typename T>
void normalize_groups(const Axis<T>& a, const T* in, T* out, int64_t g0, T* means, T* rstds) {
  const int64_t c = a.c;
  // The statistics are summed in double, in order: a float sum over a wide axis (a bag of 20,000
  // words) drifts by 1e-4 of the result; the same operations on every CPU.
  const double inv_c = 1.0 / static_cast<double>(c);
  double sum[N] = {}, squares[N] = {}, mean_wide[N];
  for (int64_t k = 0; k < c; ++k) {
    for (int64_t j = 0; j < N; ++j) sum[j] += static_cast<double>(in[(g0 + j) * c + k]);
  }
  for (int64_t j = 0; j < N; ++j) mean_wide[j] = sum[j] * inv_c;
  for (int64_t k = 0; k < c; ++k) {
    for (int64_t j = 0; j < N; ++j) {
      const double d = static_cast<double>(in[(g0 + j) * c + k]) - mean_wide[j];
      squares[j] += d * d;
    }
  }
  for (int64_t j = 0; j < N; ++j) {
    const T mean = static_cast<T>(mean_wide[j]);
    const T rstd = static_cast<T>(1.0 / std::sqrt(squares[j] * inv_c + static_cast<double>(a.epsilon)));
    means[g0 + j] = mean;
    rstds[g0 + j] = rstd;
    const T* x = in + (g0 + j) * c;
    T* y = out + (g0 + j) * c;
    for (int64_t k = 0; k < c; ++k) {
      T v = (x[k] - mean) * rstd;
      if (a.gamma != nullptr) v *= a.gamma[k];
      if (a.beta != nullptr) v += a.beta[k];
      y[k] = v;
    }
  }
}

// Backward of groups g0 .. g0 + N - 1: dgamma and dbeta summed over the groups in order, each
// group's two sums in double in order, then its dx (din != nullptr).
template <int64_t N, typename T>
void normalize_groups_backward(const Axis<T>& a, const T* in, const T* dout, const T* means, const T* rstds,
                               int64_t g0, T* dgamma, T* dbeta, T* din) {
  const int64_t c = a.c;
  const double inv_c = 1.0 / static_cast<double>(c);
  double sum_dxhat[N] = {}, sum_dxhat_xhat[N] = {};
  for (int64_t k = 0; k < c; ++k) {
    // dgamma[k] and dbeta[k] in registers over the block (the same adds in the same order; through
    // memory each add waited for the last one's store).
    T dg = dgamma != nullptr ? dgamma[k] : T(0), db = dbeta != nullptr ? dbeta[k] : T(0);
    for (int64_t j = 0; j < N; ++j) {  // examples, then positions, in order
      const int64_t at = (g0 + j) * c + k;
      const T xhat = (in[at] - means[g0 + j]) * rstds[g0 + j];
      const T dy = dout[at];
      dg += dy * xhat;
      db += dy;
      const T dxhat = a.gamma != nullptr ? dy * a.gamma[k] : dy;
      sum_dxhat[j] += dxhat;
      sum_dxhat_xhat[j] += static_cast<double>(dxhat) * static_cast<double>(xhat);
    }
    if (dgamma != nullptr) dgamma[k] = dg;
    if (dbeta != nullptr) dbeta[k] = db;
  }
  if (din == nullptr) return;
  for (int64_t j = 0; j < N; ++j) {
    const T mean = means[g0 + j], rstd = rstds[g0 + j];
    const T mean_dxhat = static_cast<T>(sum_dxhat[j] * inv_c);
    const T mean_dxhat_xhat = static_cast<T>(sum_dxhat_xhat[j] * inv_c);
    const T* x = in + (g0 + j) * c;
    const T* dy = dout + (g0 + j) * c;
    T* dx = din + (g0 + j) * c;
    for (int64_t k = 0; k < c; ++k) {
      const T xhat = (x[k] - mean) * rstd;
      const T dxhat = a.gamma != nullptr ? dy[k] * a.gamma[k] : dy[k];
      dx[k] = rstd * (dxhat - mean_dxhat - xhat * mean_dxhat_xhat);
    }
  }
}

}  // namespace

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
  const int64_t groups = in.size() / last_axis_;
  const Axis<T> a{last_axis_, epsilon_, gamma_ >= 0 ? params + gamma_ : nullptr, beta_ >= 0 ? params + beta_ : nullptr};
  int64_t g = 0;
  for (; g + kBlock <= groups; g += kBlock) {
    normalize_groups<kBlock>(a, in.data(), out.data(), g, mean_.data(), rstd_.data());
  }
  for (; g < groups; ++g) normalize_groups<1>(a, in.data(), out.data(), g, mean_.data(), rstd_.data());
}

template <typename T>
void LayerNorm<T>::backward(const T* params, ConstMatMap<T> in, ConstMatMap<T>, MatMap<T> dout, T* grads, T* din) {
  const int64_t c = last_axis_;
  const int64_t groups = in.size() / c;
  const Axis<T> a{c, epsilon_, gamma_ >= 0 ? params + gamma_ : nullptr, nullptr};
  T* dgamma = gamma_ >= 0 ? grads + gamma_ : nullptr;
  T* dbeta = beta_ >= 0 ? grads + beta_ : nullptr;
  if (dgamma != nullptr) std::fill_n(dgamma, c, T(0));
  if (dbeta != nullptr) std::fill_n(dbeta, c, T(0));
  int64_t g = 0;
  for (; g + kBlock <= groups; g += kBlock) {
    normalize_groups_backward<kBlock>(a, in.data(), dout.data(), mean_.data(), rstd_.data(), g, dgamma, dbeta, din);
  }
  for (; g < groups; ++g) {
    normalize_groups_backward<1>(a, in.data(), dout.data(), mean_.data(), rstd_.data(), g, dgamma, dbeta, din);
  }
}

template class LayerNorm<float>;
template class LayerNorm<double>;

}  // namespace pstrain::nn
