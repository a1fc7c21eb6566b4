#include "common/engine/nn/slice.h"

#include <algorithm>

namespace pstrain::nn {

template <typename T>
void Slice<T>::forward(const T*, ConstMatMap<T> in, MatMap<T> out) {
  for (int64_t b = 0; b < in.cols(); ++b) {
    const T* from = in.data() + b * in.rows() + begin_;
    std::copy(from, from + size_, out.data() + b * size_);
  }
}

template <typename T>
void Slice<T>::backward(const T*, ConstMatMap<T> in, ConstMatMap<T>, MatMap<T> dout, T*, T* din) {
  if (din == nullptr) return;
  const int64_t n = in.rows();
  for (int64_t b = 0; b < in.cols(); ++b) {
    T* to = din + b * n;
    std::fill(to, to + n, T(0));
    std::copy(dout.data() + b * size_, dout.data() + (b + 1) * size_, to + begin_);
  }
}

template class Slice<float>;
template class Slice<double>;

}  // namespace pstrain::nn
