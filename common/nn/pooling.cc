#include <algorithm>

#include "common/nn/layers.h"

namespace pstrain::nn {

template <typename T>
MaxPool2D<T>::MaxPool2D(int64_t height, int64_t width, int64_t channels, int64_t max_batch)
    : h_(height), w_(width), c_(channels) {
  argmax_.resize(static_cast<size_t>((h_ / 2) * (w_ / 2) * c_ * max_batch));
}

template <typename T>
void MaxPool2D<T>::forward(const T*, ConstMatMap<T> in, MatMap<T> out) {
  const int64_t oh = h_ / 2, ow = w_ / 2;
  const int64_t out_size = oh * ow * c_;
  for (int64_t b = 0; b < in.cols(); ++b) {
    const T* image = in.data() + b * in.rows();
    T* pooled = out.data() + b * out_size;
    int32_t* arg = argmax_.data() + b * out_size;
    for (int64_t y = 0; y < oh; ++y) {
      for (int64_t x = 0; x < ow; ++x) {
        const int64_t base = ((2 * y) * w_ + 2 * x) * c_;
        const int64_t offsets[4] = {base, base + c_, base + w_ * c_, base + (w_ + 1) * c_};
        T* dst = pooled + (y * ow + x) * c_;
        int32_t* dst_arg = arg + (y * ow + x) * c_;
        for (int64_t ch = 0; ch < c_; ++ch) {
          int64_t best = offsets[0] + ch;
          for (int k = 1; k < 4; ++k) {
            // Strictly greater: ties keep the first position, as TensorFlow does.
            if (image[offsets[k] + ch] > image[best]) best = offsets[k] + ch;
          }
          dst[ch] = image[best];
          dst_arg[ch] = static_cast<int32_t>(best);
        }
      }
    }
  }
}

template <typename T>
void MaxPool2D<T>::backward(const T*, ConstMatMap<T> in, ConstMatMap<T>, MatMap<T> dout, T*, T* din) {
  if (din == nullptr) return;
  const int64_t out_size = dout.rows();
  std::fill(din, din + in.rows() * in.cols(), T(0));
  for (int64_t b = 0; b < in.cols(); ++b) {
    T* dimage = din + b * in.rows();
    const T* d = dout.data() + b * out_size;
    const int32_t* arg = argmax_.data() + b * out_size;
    for (int64_t i = 0; i < out_size; ++i) dimage[arg[i]] += d[i];
  }
}

template <typename T>
void ReLU<T>::forward(const T*, ConstMatMap<T> in, MatMap<T> out) {
  out = in.cwiseMax(T(0));
}

template <typename T>
void ReLU<T>::backward(const T*, ConstMatMap<T>, ConstMatMap<T> out, MatMap<T> dout, T*, T* din) {
  if (din == nullptr) return;
  MatMap<T> dx(din, dout.rows(), dout.cols());
  dx = (out.array() > T(0)).select(dout, T(0));
}

template class MaxPool2D<float>;
template class MaxPool2D<double>;
template class ReLU<float>;
template class ReLU<double>;

}  // namespace pstrain::nn
