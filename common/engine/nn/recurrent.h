// Keras' LSTM and GRU over a [steps, channels] sequence, one or both directions (Bidirectional with
// merge_mode "concat"): the last step's state ([units], or [2 units] forward then backward), or with
// return_sequences every step's ([steps, units] or [steps, 2 units], the backward direction's
// outputs realigned to their steps, as Keras does).
//
//   LSTM (gates i, f, c, o in the kernel's columns):
//     i = sigmoid(x W_i + h U_i + b_i)   f = sigmoid(x W_f + h U_f + b_f)
//     g = tanh(x W_c + h U_c + b_c)      o = sigmoid(x W_o + h U_o + b_o)
//     c' = f c + i g                      h' = o tanh(c')
//   GRU (reset_after, Keras' default; gates z, r, h; bias [2, 3 units]: input, then recurrent):
//     z = sigmoid(x W_z + b_z + h U_z + br_z)   r = sigmoid(x W_r + b_r + h U_r + br_r)
//     n = tanh(x W_h + b_h + r (h U_h + br_h))  h' = z h + (1 - z) n
//
// A mask (an embedding's mask_zero, Layer::use_mask) skips steps as Keras does: at a masked step the
// state (h, and an LSTM's c) carries over unchanged and the step adds nothing to any gradient; with
// return_sequences a masked step's output is zeros (as PyTorch's packed sequences give).
//
// Tensors per direction (Keras' names and layouts): kernel [channels, G units], recurrent_kernel
// [units, G units], bias [G units] (LSTM) or [2, G units] (GRU), G = 4 or 3; the state starts at
// zero. The input products of every step are one matrix product (the batch's sequences are
// channels x (steps x batch) columns as they lie); each step adds its recurrent product. Backward
// is backpropagation through time in the reverse order, the same operations in the same order on
// every call (deterministic).
//
// Thread rules: as layer.h.
#pragma once

#include <cstdint>
#include <vector>

#include "common/engine/nn/layer.h"

namespace pstrain::nn {

template <typename T>
class Recurrent final : public Layer<T> {
 public:
  enum class Cell { kLstm, kGru };
  struct Tensors {  // one direction's, offsets in the flat buffers
    size_t kernel = 0, recurrent = 0, bias = 0;
  };
  struct Geometry {
    Cell cell = Cell::kLstm;
    int64_t steps = 0, channels = 0, units = 0;
    bool return_sequences = false;
  };
  // One direction (forward) or two (forward, backward).
  Recurrent(Geometry g, std::vector<Tensors> directions, int64_t max_batch);
  void forward(const T* params, ConstMatMap<T> in, MatMap<T> out) override;
  void backward(const T* params, ConstMatMap<T> in, ConstMatMap<T> out, MatMap<T> dout, T* grads, T* din) override;
  void use_mask(const T* ids, int64_t rows) override {
    mask_ids_ = ids;
    mask_rows_ = rows;
  }

 private:
  bool kept(int64_t b, int64_t t) const { return mask_ids_ == nullptr || mask_ids_[b * mask_rows_ + t] != T(0); }
  int64_t gate_rows() const { return (g_.cell == Cell::kLstm ? 4 : 3) * g_.units; }
  // Direction d's step s is sequence position t: s forward, steps - 1 - s backward.
  int64_t position(size_t d, int64_t s) const { return d == 0 ? s : g_.steps - 1 - s; }
  // Scratch of direction d at step s (processing order): activated gates, the cell (LSTM) or the
  // recurrent candidate h U_h + br_h (GRU), the state after the step.
  T* gates(size_t d, int64_t s, int64_t batch) { return gates_.data() + ((d * g_.steps + s) * gate_rows()) * batch; }
  T* cell(size_t d, int64_t s, int64_t batch) { return cells_.data() + ((d * g_.steps + s) * g_.units) * batch; }
  T* state(size_t d, int64_t s, int64_t batch) { return states_.data() + ((d * g_.steps + s) * g_.units) * batch; }
  void forward_direction(size_t d, const T* params, const T* in, int64_t batch);
  // Adds direction d's input gradient into din (the first direction writes it).
  void backward_direction(size_t d, const T* params, const T* in, const T* dout, int64_t batch, T* grads, T* din);

  Geometry g_;
  std::vector<Tensors> directions_;
  std::vector<T> input_products_;  // G units x (steps x batch): x W + b, by column b * steps + t
  std::vector<T> gates_, cells_, states_;
  std::vector<T> recurrent_, dstate_, dcell_, dgates_, drecurrent_, zeros_;  // one step's, per batch
  std::vector<T> dinput_products_;  // G units x (steps x batch)
  std::vector<T> drecurrent_bias_;  // GRU: the recurrent bias' gradient, summed over the steps
  const T* mask_ids_ = nullptr;
  int64_t mask_rows_ = 0;
};

}  // namespace pstrain::nn
