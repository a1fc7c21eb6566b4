#include "common/engine/nn/activations.h"

#include <algorithm>
#include <cmath>
#include <type_traits>

#include "common/engine/simd/kernels.h"

namespace pstrain::nn {
namespace {

constexpr double kLeakySlope = 0.2;
constexpr double kEluAlpha = 1.0;

template <typename T>
T sigmoid(T x) {
  return T(1) / (T(1) + std::exp(-x));
}

}  // namespace

template <typename T>
void relu_backward(int64_t n, const T* y, const T* g, T* din) {
  if constexpr (std::is_same_v<T, float>) {
    simd::kernels().relu_select(n, y, g, din);
  } else {
    for (int64_t i = 0; i < n; ++i) din[i] = y[i] > T(0) ? g[i] : T(0);
  }
}
template void relu_backward(int64_t, const float*, const float*, float*);
template void relu_backward(int64_t, const double*, const double*, double*);

template <typename T>
void ActivationLayer<T>::forward(const T*, ConstMatMap<T> in, MatMap<T> out) {
  const Eigen::Index n = in.size();
  const T* x = in.data();
  T* y = out.data();
  switch (kind_) {
    case Activation::kLinear: std::copy_n(x, n, y); return;
    case Activation::kReLU:
      if constexpr (std::is_same_v<T, float>) {
        simd::kernels().relu(n, x, y);
      } else {
        for (Eigen::Index i = 0; i < n; ++i) y[i] = x[i] > T(0) ? x[i] : T(0);
      }
      return;
    case Activation::kSigmoid:
      for (Eigen::Index i = 0; i < n; ++i) y[i] = sigmoid(x[i]);
      return;
    case Activation::kTanh:
      for (Eigen::Index i = 0; i < n; ++i) y[i] = std::tanh(x[i]);
      return;
    case Activation::kGelu:
      for (Eigen::Index i = 0; i < n; ++i) y[i] = T(0.5) * x[i] * (T(1) + std::erf(x[i] * T(M_SQRT1_2)));
      return;
    case Activation::kElu:
      for (Eigen::Index i = 0; i < n; ++i) y[i] = x[i] > T(0) ? x[i] : T(kEluAlpha) * (std::exp(x[i]) - T(1));
      return;
    case Activation::kLeakyReLU:
      for (Eigen::Index i = 0; i < n; ++i) y[i] = x[i] > T(0) ? x[i] : T(kLeakySlope) * x[i];
      return;
    case Activation::kSwish:
      for (Eigen::Index i = 0; i < n; ++i) y[i] = x[i] * sigmoid(x[i]);
      return;
    case Activation::kSoftmax:
      // Per group of the last axis, shifted by its maximum as Keras does.
      for (Eigen::Index start = 0; start < n; start += last_axis_) {
        const T* xs = x + start;
        T* ys = y + start;
        const T top = *std::max_element(xs, xs + last_axis_);
        T sum = 0;
        for (int64_t k = 0; k < last_axis_; ++k) sum += ys[k] = std::exp(xs[k] - top);
        for (int64_t k = 0; k < last_axis_; ++k) ys[k] /= sum;
      }
      return;
  }
}

template <typename T>
void ActivationLayer<T>::backward(const T*, ConstMatMap<T> in, ConstMatMap<T> out, MatMap<T> dout, T*, T* din) {
  if (din == nullptr) return;  // the model's first stage: nobody needs dLoss/din
  const Eigen::Index n = in.size();
  const T* x = in.data();
  const T* y = out.data();
  const T* g = dout.data();
  switch (kind_) {
    case Activation::kLinear: std::copy_n(g, n, din); return;
    case Activation::kReLU: relu_backward(n, y, g, din); return;
    case Activation::kSigmoid:
      for (Eigen::Index i = 0; i < n; ++i) din[i] = g[i] * y[i] * (T(1) - y[i]);
      return;
    case Activation::kTanh:
      for (Eigen::Index i = 0; i < n; ++i) din[i] = g[i] * (T(1) - y[i] * y[i]);
      return;
    case Activation::kGelu: {
      const T inv_sqrt_2pi = T(0.5 * M_2_SQRTPI * M_SQRT1_2);  // 1 / sqrt(2 pi)
      for (Eigen::Index i = 0; i < n; ++i) {
        const T cdf = T(0.5) * (T(1) + std::erf(x[i] * T(M_SQRT1_2)));
        din[i] = g[i] * (cdf + x[i] * inv_sqrt_2pi * std::exp(T(-0.5) * x[i] * x[i]));
      }
      return;
    }
    case Activation::kElu:
      for (Eigen::Index i = 0; i < n; ++i) din[i] = x[i] > T(0) ? g[i] : g[i] * (y[i] + T(kEluAlpha));
      return;
    case Activation::kLeakyReLU:
      for (Eigen::Index i = 0; i < n; ++i) din[i] = x[i] > T(0) ? g[i] : g[i] * T(kLeakySlope);
      return;
    case Activation::kSwish:
      for (Eigen::Index i = 0; i < n; ++i) {
        const T s = sigmoid(x[i]);
        din[i] = g[i] * s * (T(1) + x[i] * (T(1) - s));
      }
      return;
    case Activation::kSoftmax:
      // din = y * (dout - <dout, y>) per group.
      for (Eigen::Index start = 0; start < n; start += last_axis_) {
        T dot = 0;
        for (int64_t k = 0; k < last_axis_; ++k) dot += g[start + k] * y[start + k];
        for (int64_t k = 0; k < last_axis_; ++k) din[start + k] = y[start + k] * (g[start + k] - dot);
      }
      return;
  }
}

template class ActivationLayer<float>;
template class ActivationLayer<double>;

}  // namespace pstrain::nn
