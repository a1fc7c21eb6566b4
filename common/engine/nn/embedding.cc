#include "common/engine/nn/embedding.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "common/base/error.h"

namespace pstrain::nn {

template <typename T>
int64_t Embedding<T>::id_at(ConstMatMap<T> in, int64_t i, int64_t b) const {
  const T v = in(i, b);
  if (!(v >= T(0) && v < static_cast<T>(input_dim_)) || v != std::floor(v)) {
    throw Error("embedding: input " + std::to_string(static_cast<double>(v)) + " (value " + std::to_string(i) +
                " of an example) is not an id in 0.." + std::to_string(input_dim_ - 1));
  }
  return static_cast<int64_t>(v);
}

template <typename T>
void Embedding<T>::forward(const T* params, ConstMatMap<T> in, MatMap<T> out) {
  const T* table = params + table_;
  for (int64_t b = 0; b < in.cols(); ++b) {
    for (int64_t i = 0; i < in.rows(); ++i) {
      std::copy_n(table + id_at(in, i, b) * output_dim_, output_dim_, out.col(b).data() + i * output_dim_);
    }
  }
}

template <typename T>
void Embedding<T>::backward(const T*, ConstMatMap<T> in, ConstMatMap<T>, MatMap<T> dout, T* grads, T* din) {
  T* dtable = grads + table_;
  std::fill_n(dtable, input_dim_ * output_dim_, T(0));
  for (int64_t b = 0; b < in.cols(); ++b) {
    for (int64_t i = 0; i < in.rows(); ++i) {
      T* row = dtable + id_at(in, i, b) * output_dim_;
      const T* d = dout.col(b).data() + i * output_dim_;
      for (int64_t k = 0; k < output_dim_; ++k) row[k] += d[k];
    }
  }
  if (din != nullptr) std::fill_n(din, in.size(), T(0));
}

template class Embedding<float>;
template class Embedding<double>;

}  // namespace pstrain::nn
