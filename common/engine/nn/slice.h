// `slice` (tf.slice on the feature axis, Keras' x[:, begin:begin + size]): of a flat input of n
// features, the `size` features from `begin`. It lets one input vector feed several branches: a
// table's category ids into an `embedding`, its numbers into a `dense` (docs/JOB-SPEC.md
// "preprocessing", encode "ids"). The gradient is dout in the sliced rows and zero elsewhere.
//
// Thread rules: as layer.h.
#pragma once

#include <cstdint>

#include "common/engine/nn/layer.h"

namespace pstrain::nn {

template <typename T>
class Slice final : public Layer<T> {
 public:
  Slice(int64_t begin, int64_t size) : begin_(begin), size_(size) {}
  void forward(const T* params, ConstMatMap<T> in, MatMap<T> out) override;
  void backward(const T* params, ConstMatMap<T> in, ConstMatMap<T> out, MatMap<T> dout, T* grads,
                T* din) override;

 private:
  int64_t begin_, size_;
};

}  // namespace pstrain::nn
