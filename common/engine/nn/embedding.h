// Keras' Embedding(input_dim, output_dim): each input value is an id in [0, input_dim) and
// becomes that row of the `embeddings` table ([input_dim, output_dim]); n ids make an
// [n, output_dim] output. The table's gradient is the output gradients summed into the rows of
// the ids they came from, in example order; ids have no gradient (the layer's input gradient is
// zero). An input that is not such an id fails the step with an Error naming it (ids come from
// float32 data: uint8 data is scaled by 1/255 on the way in).
//
// With a combiner (model_spec.h Combiner; PyTorch's EmbeddingBag, TF's embedding_lookup_sparse),
// an example's n ids become one [output_dim] vector: the rows of its ids summed in input order,
// negative ids (padding) skipped; mean divides the sum by the count of ids (an example with none
// gives zeros). Backward gives each id's row the vector's gradient (mean: divided by the count),
// in the same order.
//
// A sparse table (sparse_rows.h) is laid out after the dense tensors, and a step's caller does not
// hold it whole: the layer reads the step's rows from the views use_rows() gives it, and writes
// the rows' gradient into their compact buffer, summed in the same order as the dense table's (so
// a row's sum has the same bits either way). Given no rows, forward reads the whole table from
// the flat parameters (inference on a model file), and backward fails.
//
// Thread rules: as layer.h.
#pragma once

#include <cstdint>

#include "common/engine/model_spec.h"
#include "common/engine/nn/layer.h"
#include "common/engine/nn/sparse_rows.h"

namespace pstrain::nn {

template <typename T>
class Embedding final : public Layer<T> {
 public:
  // The table at `table_offset` in the flat buffers (a sparse one: when no rows are given).
  Embedding(int64_t input_dim, int64_t output_dim, size_t table_offset, bool sparse = false,
            Combiner combiner = Combiner::kNone)
      : input_dim_(input_dim), output_dim_(output_dim), table_(table_offset), sparse_(sparse), combiner_(combiner) {}
  bool sparse() const { return sparse_; }
  // A sparse table's rows for the next passes (null: none given, which fails them).
  void use_rows(const SparseTableRows<T>* rows) { rows_ = rows; }

  void forward(const T* params, ConstMatMap<T> in, MatMap<T> out) override;
  void backward(const T* params, ConstMatMap<T> in, ConstMatMap<T> out, MatMap<T> dout, T* grads,
                T* din) override;

 private:
  // The id at value i of example b; -1 for padding (with a combiner).
  int64_t id_at(ConstMatMap<T> in, int64_t i, int64_t b) const;
  // What an example's vector is divided by: its ids' count for mean (1 when none), else 1.
  T divisor(ConstMatMap<T> in, int64_t b) const;
  const T* row_of(const T* params, int64_t id) const;
  // A sparse table: where id's row is among the step's rows.
  size_t row_index(int64_t id) const;
  const SparseTableRows<T>& rows() const;

  int64_t input_dim_, output_dim_;
  size_t table_;
  bool sparse_;
  Combiner combiner_;
  const SparseTableRows<T>* rows_ = nullptr;
};

}  // namespace pstrain::nn
