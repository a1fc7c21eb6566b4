// The arithmetic of a model, for the benchmarks' achieved GFLOPS and fraction of the CPU's peak
// (docs/BENCHMARKS.md "Fraction of peak"): the multiply-adds of the layers that multiply
// matrices, 2 FLOPs each, for one example's forward pass:
//   dense                2 x positions x inputs x units (positions: the steps of a sequence, else 1)
//   conv1d, conv2d       2 x output positions x filters x kernel taps x input channels
//   lstm, gru            2 x steps x gates x units x (inputs + units) (4 gates, 3; x2 bidirectional)
//   multi_head_attention 2 x steps x channels x heads x (2 key_dim + value_dim) (projections)
//                        + 2 x heads x steps^2 x (key_dim + value_dim) (scores, context)
//                        + 2 x steps x heads x value_dim x channels (output projection)
// Element-wise layers, pooling, normalization, embeddings (lookups), merges and the loss are left
// out: memory-bound and small against the products in the models measured. A training step
// costs about 3 x forward per example (backward: each product's input and weight gradients).
//
// Thread rules: a pure function.
#pragma once

#include "common/engine/model_spec.h"

namespace pstrain {

// FLOPs of one example's forward pass through `spec`'s matrix products; throws SpecError as
// infer_shapes does for a model that does not fit its input.
double forward_flops(const ModelSpec& spec);

}  // namespace pstrain
