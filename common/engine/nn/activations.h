// Element-wise activations as a layer of their own (Keras' `activation` layer, and the activation
// of a dense or conv2d layer other than ReLU, which those layers fuse), with Keras' formulas:
//   sigmoid     1 / (1 + e^-x)
//   tanh        tanh(x)
//   softmax     e^x_i / sum_j e^x_j over the last axis of one example (a dense layer's units,
//               a conv2d output's channels at each position), shifted by the maximum
//   gelu        x * Phi(x) = 0.5 x (1 + erf(x / sqrt 2)), the exact form (Keras' default,
//               approximate=False)
//   elu         x if x > 0, else e^x - 1 (alpha 1)
//   leaky_relu  x if x > 0, else 0.2 x (Keras' keras.activations.leaky_relu default slope)
//   swish       x * sigmoid(x) (also called silu)
//   relu        max(x, 0)
// Every output depends on its own example only, so a batch split across workers computes the
// same values bit for bit.
//
// Thread rules: as layer.h.
#pragma once

#include "common/engine/model_spec.h"
#include "common/engine/nn/layer.h"

namespace pstrain::nn {

// The ReLU's backward: din = y > 0 ? g : 0 (din may be g), by the per-level kernel for float.
template <typename T>
void relu_backward(int64_t n, const T* y, const T* g, T* din);

template <typename T>
class ActivationLayer final : public Layer<T> {
 public:
  // `last_axis`: the size of the values' last axis (softmax's groups).
  ActivationLayer(Activation kind, int64_t last_axis) : kind_(kind), last_axis_(last_axis) {}
  void forward(const T* params, ConstMatMap<T> in, MatMap<T> out) override;
  void backward(const T* params, ConstMatMap<T> in, ConstMatMap<T> out, MatMap<T> dout, T* grads,
                T* din) override;

 private:
  Activation kind_;
  int64_t last_axis_;
};

}  // namespace pstrain::nn
