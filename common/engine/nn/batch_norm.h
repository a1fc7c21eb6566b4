// Batch normalization, as Keras' BatchNormalization(axis=-1) with `virtual_batch_size` (ghost
// batches). In training each ghost batch (consecutive runs of `ghost` examples of the batch the
// layer is given, the last one possibly shorter) is normalized with its own mean and (biased)
// variance per channel, over its examples and their positions:
//   y = (x - mean) / sqrt(var + epsilon) * gamma + beta.
// In inference the moving statistics are used instead. The moving statistics are parameters of
// their own (`moving_mean` starting at 0, `moving_variance` at 1) that no optimizer touches: the
// layer's "gradient" for them is the ghost batches' statistics weighted by their examples (sum
// over ghost batches of n_g * stat_g); divided by the step's examples like every gradient, that
// is the example-weighted mean of the ghost batches' statistics, and the owner of the parameters
// (a server, the standalone trainer) sets moving = momentum * moving + (1 - momentum) * it
// (moving_statistics.h). Each ghost batch lies inside one worker's slice, so the statistics do not
// depend on how many workers share a batch: sync N workers stay equal to N slices bit for bit.
//
// A ReLU that reads only this layer's output is fused into it (the model decides: set_relu): the
// forward writes max(y, 0) in the normalizing pass, and the backward takes the ReLU's mask from
// that output as it goes, so neither an activation pass nor its buffer exists. The values are the
// ReLU layer's: the gradient is dy where the output is > 0, else 0.
//
// The passes over the activations (the statistics, the normalization, the backward's sums and
// input gradient) are the per-CPU-level kernels of common/engine/simd/kernels.h for float, and
// their scalar twins for double (gradient checks): vectorized along the channels, so every
// channel's sums still add the examples and positions in order.
//
// Thread rules: as layer.h.
#pragma once

#include <cstdint>
#include <vector>

#include "common/engine/nn/layer.h"

namespace pstrain::nn {

template <typename T>
class BatchNorm final : public Layer<T> {
 public:
  struct Offsets {
    int64_t gamma = -1, beta = -1;  // -1 without scale / center
    int64_t moving_mean = 0, moving_variance = 0;
  };
  // size: values per example; channels: the last axis; ghost: examples per ghost batch (> 0).
  BatchNorm(int64_t size, int64_t channels, int64_t ghost, float epsilon, Offsets offsets, int64_t max_batch);
  void set_training(bool training) { training_ = training; }
  void set_relu(bool relu) { relu_ = relu; }
  void forward(const T* params, ConstMatMap<T> in, MatMap<T> out) override;
  void backward(const T* params, ConstMatMap<T> in, ConstMatMap<T> out, MatMap<T> dout, T* grads,
                T* din) override;

 private:
  int64_t channels_, ghost_;
  T epsilon_;
  Offsets at_;
  bool training_ = false, relu_ = false;
  // The last training forward's statistics, by ghost batch then channel.
  std::vector<T> mean_, var_, rstd_;
  std::vector<T> sum_dxhat_, sum_dxhat_xhat_;  // backward's per-channel sums (then means)
  std::vector<T> ones_, zeros_;                // gamma and beta of a layer without scale / center
  std::vector<T> unused_dgamma_, unused_dbeta_;  // where their gradients go
  std::vector<T> moving_rstd_;                  // inference: 1 / sqrt(moving_variance + epsilon)
};

}  // namespace pstrain::nn
