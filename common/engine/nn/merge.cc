#include "common/engine/nn/merge.h"

#include <algorithm>
#include <type_traits>

#include "common/engine/nn/activations.h"
#include "common/engine/simd/kernels.h"

namespace pstrain::nn {

template <typename T>
Merge<T>::Merge(LayerType type, std::vector<int64_t> widths, int64_t out_size, bool self_interaction)
    : type_(type), self_interaction_(self_interaction), widths_(std::move(widths)) {
  if (type_ == LayerType::kDotInteraction) {
    positions_ = 1;
    return;
  }
  for (int64_t w : widths_) {
    offsets_.push_back(total_width_);
    total_width_ += w;
  }
  if (type_ == LayerType::kAdd) total_width_ = widths_[0];
  positions_ = out_size / total_width_;
}

template <typename T>
void Merge<T>::forward(const std::vector<ConstMatMap<T>>& ins, MatMap<T> out) const {
  const int64_t batch = out.cols();
  if (type_ == LayerType::kDotInteraction) {
    dot_forward(ins, out);
    return;
  }
  if (type_ == LayerType::kAdd) {
    if (!relu_) {
      out = ins[0];
      for (size_t k = 1; k < ins.size(); ++k) out += ins[k];
      return;
    }
    // One pass: each value summed in input order, then the ReLU (as the activation layer's).
    const Eigen::Index n = out.size();
    T* o = out.data();
    if constexpr (std::is_same_v<T, float>) {
      if (ins.size() == 2) {
        simd::kernels().add_relu(n, ins[0].data(), ins[1].data(), o);
        return;
      }
    }
    for (Eigen::Index i = 0; i < n; ++i) {
      T v = ins[0].data()[i];
      for (size_t k = 1; k < ins.size(); ++k) v += ins[k].data()[i];
      o[i] = v > T(0) ? v : T(0);
    }
    return;
  }
  for (int64_t b = 0; b < batch; ++b) {
    T* o = out.col(b).data();
    for (size_t k = 0; k < ins.size(); ++k) {
      const T* in = ins[k].col(b).data();
      const int64_t w = widths_[k];
      for (int64_t p = 0; p < positions_; ++p) std::copy_n(in + p * w, w, o + p * total_width_ + offsets_[k]);
    }
  }
}

template <typename T>
void Merge<T>::backward(const std::vector<ConstMatMap<T>>& ins, ConstMatMap<T> out, ConstMatMap<T> dout, size_t k,
                        MatMap<T> din) const {
  if (type_ == LayerType::kDotInteraction) {
    dot_backward(ins, dout, k, din);
    return;
  }
  if (type_ == LayerType::kAdd) {
    if (!relu_) {
      din = dout;
      return;
    }
    relu_backward(din.size(), out.data(), dout.data(), din.data());
    return;
  }
  const int64_t w = widths_[k];
  for (int64_t b = 0; b < dout.cols(); ++b) {
    const T* d = dout.col(b).data();
    T* o = din.col(b).data();
    for (int64_t p = 0; p < positions_; ++p) std::copy_n(d + p * total_width_ + offsets_[k], w, o + p * w);
  }
}

template <typename T>
void Merge<T>::dot_forward(const std::vector<ConstMatMap<T>>& ins, MatMap<T> out) const {
  const auto f = static_cast<int64_t>(ins.size());
  const int64_t d = widths_[0];
  for (int64_t b = 0; b < out.cols(); ++b) {
    T* o = out.col(b).data();
    for (int64_t i = 0; i < f; ++i) {
      const T* x = ins[static_cast<size_t>(i)].col(b).data();
      for (int64_t j = 0; j < (self_interaction_ ? i + 1 : i); ++j) {
        const T* y = ins[static_cast<size_t>(j)].col(b).data();
        T dot = 0;
        for (int64_t e = 0; e < d; ++e) dot += x[e] * y[e];
        *o++ = dot;
      }
    }
  }
}

template <typename T>
void Merge<T>::dot_backward(const std::vector<ConstMatMap<T>>& ins, ConstMatMap<T> dout, size_t k, MatMap<T> din) const {
  const auto f = static_cast<int64_t>(ins.size());
  const int64_t d = widths_[0];
  const auto kk = static_cast<int64_t>(k);
  for (int64_t b = 0; b < dout.cols(); ++b) {
    const T* g = dout.col(b).data();
    T* o = din.col(b).data();
    std::fill(o, o + d, T(0));
    int64_t p = 0;  // the pair's index in the output
    for (int64_t i = 0; i < f; ++i) {
      for (int64_t j = 0; j < (self_interaction_ ? i + 1 : i); ++j, ++p) {
        if (i != kk && j != kk) continue;
        if (i == kk && j == kk) {  // d(x . x)/dx = 2 x
          const T* x = ins[k].col(b).data();
          for (int64_t e = 0; e < d; ++e) o[e] += 2 * g[p] * x[e];
          continue;
        }
        const T* other = ins[static_cast<size_t>(i == kk ? j : i)].col(b).data();
        for (int64_t e = 0; e < d; ++e) o[e] += g[p] * other[e];
      }
    }
  }
}

template class Merge<float>;
template class Merge<double>;

}  // namespace pstrain::nn
