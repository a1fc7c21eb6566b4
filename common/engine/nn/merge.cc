#include "common/engine/nn/merge.h"

#include <algorithm>

namespace pstrain::nn {

template <typename T>
Merge<T>::Merge(LayerType type, std::vector<int64_t> widths, int64_t out_size) : type_(type), widths_(std::move(widths)) {
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
  if (type_ == LayerType::kAdd) {
    out = ins[0];
    for (size_t k = 1; k < ins.size(); ++k) out += ins[k];
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
void Merge<T>::backward(ConstMatMap<T> dout, size_t k, MatMap<T> din) const {
  if (type_ == LayerType::kAdd) {
    din = dout;
    return;
  }
  const int64_t w = widths_[k];
  for (int64_t b = 0; b < dout.cols(); ++b) {
    const T* d = dout.col(b).data();
    T* o = din.col(b).data();
    for (int64_t p = 0; p < positions_; ++p) std::copy_n(d + p * total_width_ + offsets_[k], w, o + p * w);
  }
}

template class Merge<float>;
template class Merge<double>;

}  // namespace pstrain::nn
