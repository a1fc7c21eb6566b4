#include "common/nn/layers.h"

namespace pstrain::nn {

template <typename T>
void Dense<T>::forward(const T* params, ConstMatMap<T> in, MatMap<T> out) {
  ConstMatMap<T> w(params + kernel_, out_, in_);  // [in, out] row-major == [out x in] column-major
  ConstVecMap<T> b(params + bias_, out_);
  out.noalias() = w * in;
  if (relu_) {
    out = (out.colwise() + b).cwiseMax(T(0));
  } else {
    out.colwise() += b;
  }
}

template <typename T>
void Dense<T>::backward(const T* params, ConstMatMap<T> in, ConstMatMap<T> out, MatMap<T> dout, T* grads,
                        T* din) {
  if (relu_) dout = (out.array() > T(0)).select(dout, T(0));
  MatMap<T> dw(grads + kernel_, out_, in_);
  VecMap<T> db(grads + bias_, out_);
  dw.noalias() = dout * in.transpose();
  db.noalias() = dout.rowwise().sum();
  if (din != nullptr) {
    ConstMatMap<T> w(params + kernel_, out_, in_);
    MatMap<T> dx(din, in_, dout.cols());
    dx.noalias() = w.transpose() * dout;
  }
}

template class Dense<float>;
template class Dense<double>;

}  // namespace pstrain::nn
