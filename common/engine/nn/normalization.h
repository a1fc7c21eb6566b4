// Layer normalization, as Keras' LayerNormalization(axis=-1): each example's values are
// normalized over their last axis (a dense layer's units; a conv2d output's channels at each
// position), y = (x - mean) / sqrt(var + epsilon) * gamma + beta, with gamma (`scale`, starting
// at 1) and beta (`center`, starting at 0) trainable, one per position of that axis. The
// statistics are an example's own, so a batch split across workers computes the same values bit
// for bit; the gradients of gamma and beta are summed over the batch in example order.
//
// Thread rules: as layer.h.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "common/engine/nn/layer.h"

namespace pstrain::nn {

template <typename T>
class LayerNorm final : public Layer<T> {
 public:
  // gamma_offset / beta_offset: in the flat parameter buffer, or -1 without scale / center.
  LayerNorm(int64_t size, int64_t last_axis, float epsilon, int64_t gamma_offset, int64_t beta_offset,
            int64_t max_batch);
  void forward(const T* params, ConstMatMap<T> in, MatMap<T> out) override;
  void backward(const T* params, ConstMatMap<T> in, ConstMatMap<T> out, MatMap<T> dout, T* grads,
                T* din) override;

 private:
  int64_t last_axis_;
  T epsilon_;
  int64_t gamma_, beta_;
  std::vector<T> mean_, rstd_;  // per group of the last forward
};

}  // namespace pstrain::nn
