// Merge layers of the layer graph (model_spec.h): Keras' Add and Concatenate(axis=-1), and
// TensorFlow Recommenders' DotInteraction (DLRM's feature interaction).
//   add          out = in_0 + in_1 + ... (inputs of one shape), summed in input order
//   concatenate  at each position of the other axes, in_0's last-axis values, then in_1's, ...
//   dot_interaction  F inputs, each one vector of D values: out = the dots in_i . in_j for
//                each pair j < i, in row-major order of the lower triangle ((1,0), (2,0), (2,1),
//                (3,0), ...), F (F - 1) / 2 values; with self_interaction j <= i ((0,0), (1,0),
//                (1,1), ...), F (F + 1) / 2. Each dot sums over d = 0..D-1 in order; an input's
//                gradient sums its pairs' terms in pair order (a fixed order: the same bits on
//                every run and every worker).
// An add may have a ReLU fused into it (set_relu, the model's choice where a ReLU reads only the
// add's output): out = max(sum, 0), and every input's gradient is dout where out > 0, else 0.
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
  // `widths`: each input's last axis (add: all equal; dot_interaction: each input's values);
  // `out_size`: values per example out.
  Merge(LayerType type, std::vector<int64_t> widths, int64_t out_size, bool self_interaction = false);

  int64_t input_size(size_t k) const { return positions_ * widths_[k]; }
  // Fuses a ReLU into an add (only).
  void set_relu(bool relu) { relu_ = relu && type_ == LayerType::kAdd; }
  void forward(const std::vector<ConstMatMap<T>>& ins, MatMap<T> out) const;
  // din: dLoss/d(input k), fully written, from dout = dLoss/d(out), the forward's inputs and its
  // output `out`.
  void backward(const std::vector<ConstMatMap<T>>& ins, ConstMatMap<T> out, ConstMatMap<T> dout, size_t k,
                MatMap<T> din) const;

 private:
  void dot_forward(const std::vector<ConstMatMap<T>>& ins, MatMap<T> out) const;
  void dot_backward(const std::vector<ConstMatMap<T>>& ins, ConstMatMap<T> dout, size_t k, MatMap<T> din) const;

  LayerType type_;
  bool self_interaction_ = false;
  bool relu_ = false;
  std::vector<int64_t> widths_;
  std::vector<int64_t> offsets_;  // concatenate: where input k starts within a position
  int64_t total_width_ = 0, positions_ = 0;
};

}  // namespace pstrain::nn
