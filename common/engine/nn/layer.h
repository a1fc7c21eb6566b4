// The layer interface of the engine.
//
// A layer is pure math: it reads its parameters from the model's flat parameter buffer, writes
// its gradients into the flat gradient buffer, and keeps only scratch space sized for the largest
// batch, allocated at construction or at its first use, so a training step after the first
// allocates nothing. Gradients are overwritten, not
// accumulated: every layer writes all of its gradient slice on each backward call.
//
// Thread rules: a layer belongs to one Model, used by one thread at a time.
#pragma once

#include <cstdint>

#include "common/engine/nn/matrix.h"

namespace pstrain::nn {

template <typename T>
class Layer {
 public:
  virtual ~Layer() = default;

  // in: in_size x batch; out: out_size x batch, fully written.
  virtual void forward(const T* params, ConstMatMap<T> in, MatMap<T> out) = 0;

  // in/out: the values of the last forward call; dout: dLoss/dout, which the layer may modify
  // (masking in place is cheaper than a copy). grads: the flat gradient buffer. din: where to
  // write dLoss/din, or nullptr when nobody needs it (the first layer).
  virtual void backward(const T* params, ConstMatMap<T> in, ConstMatMap<T> out, MatMap<T> dout,
                        T* grads, T* din) = 0;

  // A sequence mask (an embedding's mask_zero, model.h) for the next forward and its backward:
  // step t of example b is masked when ids[b * rows + t] is 0. Only the layers that take masks
  // (lstm, gru, global 1-D pooling) override it; the model calls it before each forward.
  virtual void use_mask(const T* ids, int64_t rows) {
    (void)ids;
    (void)rows;
  }
};

}  // namespace pstrain::nn
