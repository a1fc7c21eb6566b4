// Merge layers of the layer graph (model_spec.h): Keras' Add and Concatenate(axis=-1).
//   add          out = in_0 + in_1 + ... (inputs of one shape), summed in input order
//   concatenate  at each position of the other axes, in_0's last-axis values, then in_1's, ...
// A merge has several inputs, so it is not a Layer: the model calls it with all of them, and
// asks for each input's gradient separately (the model sums the gradients of a value several
// layers read). No parameters; values depend on their own example only.
//
// Thread rules: as layer.h.
#pragma once

#include <cstdint>
#include <vector>

#include "common/engine/model_spec.h"
#include "common/engine/nn/matrix.h"

namespace pstrain::nn {

template <typename T>
class Merge {
 public:
  // `widths`: each input's last axis (add: all equal); `out_size`: values per example out.
  Merge(LayerType type, std::vector<int64_t> widths, int64_t out_size);

  int64_t input_size(size_t k) const { return positions_ * widths_[k]; }
  void forward(const std::vector<ConstMatMap<T>>& ins, MatMap<T> out) const;
  // din: dLoss/d(input k), fully written, from dout = dLoss/d(out).
  void backward(ConstMatMap<T> dout, size_t k, MatMap<T> din) const;

 private:
  LayerType type_;
  std::vector<int64_t> widths_;
  std::vector<int64_t> offsets_;  // concatenate: where input k starts within a position
  int64_t total_width_ = 0, positions_ = 0;
};

}  // namespace pstrain::nn
