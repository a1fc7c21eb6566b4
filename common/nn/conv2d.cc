#include <algorithm>

#include "common/nn/layers.h"

namespace pstrain::nn {

template <typename T>
Conv2D<T>::Conv2D(Geometry g, bool relu, size_t kernel_offset, size_t bias_offset, int64_t max_batch)
    : g_(g), relu_(relu), kernel_(kernel_offset), bias_(bias_offset) {
  patches_.resize(g_.patch_size(), g_.out_h() * g_.out_w() * max_batch);
  dpatches_.resize(g_.patch_size(), g_.out_h() * g_.out_w() * max_batch);
}

template <typename T>
void Conv2D<T>::forward(const T* params, ConstMatMap<T> in, MatMap<T> out) {
  const int64_t batch = in.cols();
  const int64_t oh = g_.out_h(), ow = g_.out_w();
  const int64_t run = g_.kernel_w * g_.channels;  // one kernel row of a patch is contiguous input
  const int64_t columns = oh * ow * batch;
  // im2col: patch column (b, y, x) holds the kernel_h runs of `run` values under the kernel, in
  // the kernel's [kh, kw, cin] order.
  for (int64_t b = 0; b < batch; ++b) {
    const T* image = in.data() + b * in.rows();
    for (int64_t y = 0; y < oh; ++y) {
      for (int64_t x = 0; x < ow; ++x) {
        T* column = patches_.data() + ((b * oh + y) * ow + x) * g_.patch_size();
        for (int64_t ky = 0; ky < g_.kernel_h; ++ky) {
          const T* src = image + ((y + ky) * g_.width + x) * g_.channels;
          std::copy(src, src + run, column + ky * run);
        }
      }
    }
  }
  auto patches = patches_.leftCols(columns);
  ConstMatMap<T> w(params + kernel_, g_.filters, g_.patch_size());
  ConstVecMap<T> bias(params + bias_, g_.filters);
  MatMap<T> y(out.data(), g_.filters, columns);  // [filters x (b, y, x)] == HWC columns per example
  y.noalias() = w * patches;
  if (relu_) {
    y = (y.colwise() + bias).cwiseMax(T(0));
  } else {
    y.colwise() += bias;
  }
}

template <typename T>
void Conv2D<T>::backward(const T* params, ConstMatMap<T> in, ConstMatMap<T> out, MatMap<T> dout, T* grads,
                         T* din) {
  const int64_t batch = in.cols();
  const int64_t oh = g_.out_h(), ow = g_.out_w();
  const int64_t columns = oh * ow * batch;
  MatMap<T> dy(dout.data(), g_.filters, columns);
  if (relu_) {
    ConstMatMap<T> y(out.data(), g_.filters, columns);
    dy = (y.array() > T(0)).select(dy, T(0));
  }
  MatMap<T> dw(grads + kernel_, g_.filters, g_.patch_size());
  VecMap<T> db(grads + bias_, g_.filters);
  dw.noalias() = dy * patches_.leftCols(columns).transpose();
  db.noalias() = dy.rowwise().sum();
  if (din == nullptr) return;

  ConstMatMap<T> w(params + kernel_, g_.filters, g_.patch_size());
  auto dpatches = dpatches_.leftCols(columns);
  dpatches.noalias() = w.transpose() * dy;
  // col2im: scatter-add every patch column back onto the input positions it was read from.
  const int64_t run = g_.kernel_w * g_.channels;
  std::fill(din, din + in.rows() * batch, T(0));
  for (int64_t b = 0; b < batch; ++b) {
    T* image = din + b * in.rows();
    for (int64_t y = 0; y < oh; ++y) {
      for (int64_t x = 0; x < ow; ++x) {
        const T* column = dpatches_.data() + ((b * oh + y) * ow + x) * g_.patch_size();
        for (int64_t ky = 0; ky < g_.kernel_h; ++ky) {
          T* dst = image + ((y + ky) * g_.width + x) * g_.channels;
          const T* src = column + ky * run;
          for (int64_t i = 0; i < run; ++i) dst[i] += src[i];
        }
      }
    }
  }
}

template class Conv2D<float>;
template class Conv2D<double>;

}  // namespace pstrain::nn
