// Keras' Embedding(input_dim, output_dim): each input value is an id in [0, input_dim) and
// becomes that row of the `embeddings` table ([input_dim, output_dim]); n ids make an
// [n, output_dim] output. The table's gradient is the output gradients summed into the rows of
// the ids they came from, in example order; ids have no gradient (the layer's input gradient is
// zero). An input that is not such an id fails the step with an Error naming it (ids come from
// float32 data: uint8 data is scaled by 1/255 on the way in).
//
// Thread rules: as layer.h.
#pragma once

#include <cstdint>

#include "common/engine/nn/layer.h"

namespace pstrain::nn {

template <typename T>
class Embedding final : public Layer<T> {
 public:
  Embedding(int64_t input_dim, int64_t output_dim, size_t table_offset)
      : input_dim_(input_dim), output_dim_(output_dim), table_(table_offset) {}
  void forward(const T* params, ConstMatMap<T> in, MatMap<T> out) override;
  void backward(const T* params, ConstMatMap<T> in, ConstMatMap<T> out, MatMap<T> dout, T* grads,
                T* din) override;

 private:
  int64_t id_at(ConstMatMap<T> in, int64_t i, int64_t b) const;

  int64_t input_dim_, output_dim_;
  size_t table_;
};

}  // namespace pstrain::nn
