// What a transformer encoder needs over a [steps, channels] sequence beside the layer norm and the
// residual add: Keras' MultiHeadAttention called on one sequence (self-attention), and learned
// positions added to a sequence.
//
//   multi_head_attention (H heads, key width K, value width V; X the sequence, steps as rows):
//     Q_h = X Wq_h + bq_h    K_h = X Wk_h + bk_h    V_h = X Wv_h + bv_h
//     A_h = softmax over the allowed keys of (Q_h K_h^T / sqrt(K))   (each query's row)
//     out = sum over h of (A_h V_h) Wo_h + bo
//   Key j is allowed for query i unless step j is padding (a mask, Layer::use_mask), step i is
//   padding (Keras: a masked query attends to nothing), or, with use_causal_mask, j > i. A query
//   with no allowed key has all-zero weights (its output is bo), as Keras 3's masked softmax gives.
//   With `dropout` (Keras' MultiHeadAttention dropout), in training the weights A_h are dropped
//   and scaled as Dropout does (dropout.h: drawn from the model's seed, the layer, the epoch and
//   the example's index, weight (h, i, j) of example b its value number (h S + i) S + j), before
//   they weigh the values; inference uses A_h. The float engine's softmax and its backward are the
//   simd kernels' masked_softmax and softmax_backward (their own exp, sums in 16 fixed lanes); the
//   double engine's the same formulas in plain order with std::exp.
//
// Layouts (Keras' names): query/key/value kernels [channels, H, K or V] (column-major (H K) x
// channels: one product projects every step of the batch), biases [H, K or V], the output kernel
// [H, V, channels], its bias [channels]. Scores are kept for backward: H x steps x steps per
// example, of which only the block of the example's span (Span below: from its first step that is
// not padding, rounded down to a multiple of 16, to its last) is computed and read, and with
// use_causal_mask only the triangle of allowed pairs, in blocks (Block below). Every loop and product runs in
// a fixed order (deterministic).
//
//   position_embedding: out[t] = in[t] + P[t] with P [steps, channels] learned (the position
//   half of the Keras guide's TokenAndPositionEmbedding; Keras' Embedding initializer).
//
// Thread rules: as layer.h.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "common/engine/nn/dropout.h"
#include "common/engine/nn/layer.h"

namespace pstrain::nn {

template <typename T>
class MultiHeadAttention final : public Layer<T> {
 public:
  static constexpr size_t kNoBias = static_cast<size_t>(-1);
  struct Geometry {
    int64_t steps = 0, channels = 0, heads = 0, key_dim = 0, value_dim = 0;
    bool causal = false;
    float dropout = 0.0f;  // of the weights, in training
    uint64_t stream = 0;   // the dropout's draws (the model's seed mixed with the layer's name)
  };
  // Offsets in the flat buffers; the biases kNoBias without use_bias.
  struct Tensors {
    size_t query = 0, query_bias = kNoBias, key = 0, key_bias = kNoBias, value = 0, value_bias = kNoBias;
    size_t output = 0, output_bias = kNoBias;
  };
  MultiHeadAttention(Geometry g, Tensors w, int64_t max_batch);
  void forward(const T* params, ConstMatMap<T> in, MatMap<T> out) override;
  void backward(const T* params, ConstMatMap<T> in, ConstMatMap<T> out, MatMap<T> dout, T* grads, T* din) override;
  void use_mask(const T* ids, int64_t rows) override {
    mask_ids_ = ids;
    mask_rows_ = rows;
  }
  // Training with these keys (the weights' dropout), or inference (ids == nullptr).
  void set_keys(const ExampleKeys& keys) { example_keys_ = keys; }

 private:
  bool kept(int64_t b, int64_t t) const { return mask_ids_ == nullptr || mask_ids_[b * mask_rows_ + t] != T(0); }
  // Example b's span [lo, hi): from its first step that is not padding, rounded down to a multiple
  // of kSpanAlign, to just after its last; empty when every step is padding. Weights outside it are
  // zero, so the products and softmaxes run over the span alone (padded batches' usual case: a
  // sequence of L steps in S costs L^2, not S^2). The rounding keeps each key in the softmax lane
  // it has over the whole sequence (simd's 16 lanes), so the sums are those over all S keys.
  struct Span {
    int64_t lo = 0, hi = 0;
    int64_t size() const { return hi - lo; }
  };
  static constexpr int64_t kSpanAlign = 16;
  Span span(int64_t b) const;
  // The span's queries in the blocks whose products run together: the whole span at once, or,
  // causal, kCausalBlock queries at a time, each block's products over the keys up to its last
  // query only (the keys after it are not allowed for any of them). Causal attention so computes
  // the triangle and half of each block's diagonal square beside it (58% of a 200-step span's
  // square). The weights are zero past a column's `seen` keys (forward writes them); the scores'
  // gradients there are neither written nor read. The blocks are fixed by the span alone, so an
  // example's products do not depend on its batch.
  struct Block {
    int64_t begin = 0, end = 0;  // queries [begin, end)
    int64_t seen = 0;            // the span's first `seen` keys
    int64_t size() const { return end - begin; }
  };
  static constexpr int64_t kCausalBlock = 32;
  std::vector<Block> blocks(Span s) const;
  // Zeroes example b's columns (rows values each) of m outside span s.
  void zero_outside(T* m, int64_t rows, int64_t b, Span s) const;
  // Example b's head h: its weights (steps x steps, column i the query i's over the keys).
  T* weights(int64_t b, int64_t h) { return weights_.data() + (b * g_.heads + h) * g_.steps * g_.steps; }
  // Training with dropout: example b's head h's dropout factors (0 or 1 / (1 - dropout)), as weights().
  bool dropping() const { return g_.dropout > 0.0f && example_keys_.ids != nullptr; }
  T* drop_factors(int64_t b, int64_t h) { return drop_factors_.data() + (b * g_.heads + h) * g_.steps * g_.steps; }
  // The weights A_h (a) as the values see them: `a` itself, or dropped into dropped_ (the
  // span's block; the same indexing as a).
  const T* weighing(const T* a, int64_t b, int64_t h, Span s);
  // Query column's softmax over its n keys from key `first` (those after are not allowed), which
  // key_kept_ marks; float's is simd's masked_softmax. And its backward over n weights.
  void softmax(int64_t first, int64_t n, T scale, T* column) const;
  void softmax_backward(int64_t n, T scale, const T* weight, T* column) const;
  // rows x columns = kernel * x (+ bias per row); kernel column-major rows x inner.
  void project(const T* kernel, size_t bias, const T* params, const T* x, int64_t rows, int64_t inner, int64_t columns,
               T* y) const;
  // The kernel's and bias' gradients of project, and dx (+)= kernel^T dy.
  void project_backward(size_t kernel, size_t bias, const T* params, const T* x, const T* dy, int64_t rows, int64_t inner,
                        int64_t columns, T* grads, T* dx, bool accumulate) const;

  Geometry g_;
  Tensors w_;
  std::vector<T> queries_, keys_, values_, context_, weights_;  // the last forward's
  std::vector<T> dqueries_, dkeys_, dvalues_, dcontext_, dscores_;
  std::vector<T> key_kept_;  // the current example's: 1 where a key is not padding, else 0
  std::vector<T> drop_factors_, dropped_;  // with dropout: by weight, the last training forward's; one head's
  ExampleKeys example_keys_;
  const T* mask_ids_ = nullptr;
  int64_t mask_rows_ = 0;
};

template <typename T>
class PositionEmbedding final : public Layer<T> {
 public:
  PositionEmbedding(int64_t size, size_t positions) : size_(size), positions_(positions) {}
  void forward(const T* params, ConstMatMap<T> in, MatMap<T> out) override;
  void backward(const T* params, ConstMatMap<T> in, ConstMatMap<T> out, MatMap<T> dout, T* grads, T* din) override;

 private:
  int64_t size_;      // steps x channels
  size_t positions_;  // offset of P
};

}  // namespace pstrain::nn
