#include "common/nn/gemm.h"
#include "common/nn/layers.h"

namespace pstrain::nn {

template <typename T>
void Dense<T>::forward(const T* params, ConstMatMap<T> in, MatMap<T> out) {
  // The kernel, [in, out] row-major, is the [out x in] column-major matrix W^T.
  const T* w = params + kernel_;
  ConstVecMap<T> b(params + bias_, out_);
  const int64_t batch = in.cols();
  out.colwise() = b;  // then accumulate the product onto the bias (beta = 1): one pass fewer
  gemm<T>(Op::kNone, Op::kNone, out_, batch, in_, w, out_, in.data(), in_, T(1), out.data(), out_);
  if (relu_) out = out.cwiseMax(T(0));
}

template <typename T>
void Dense<T>::backward(const T* params, ConstMatMap<T> in, ConstMatMap<T> out, MatMap<T> dout, T* grads,
                        T* din) {
  const int64_t batch = in.cols();
  if (relu_) dout = (out.array() > T(0)).select(dout, T(0));
  gemm<T>(Op::kNone, Op::kTranspose, out_, in_, batch, dout.data(), out_, in.data(), in_, T(0), grads + kernel_, out_);
  VecMap<T>(grads + bias_, out_).noalias() = dout.rowwise().sum();
  if (din != nullptr) {
    gemm<T>(Op::kTranspose, Op::kNone, in_, batch, out_, params + kernel_, out_, dout.data(), out_, T(0), din, in_);
  }
}

template class Dense<float>;
template class Dense<double>;

}  // namespace pstrain::nn
