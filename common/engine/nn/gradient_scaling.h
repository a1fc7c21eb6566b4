// The once-per-step part of the gradient: dividing the summed-loss gradient by the number of
// examples in the step, and adding the L2 regulariser's gradient (2 * l2 * w) to kernels.
//
// docs/DESIGN-NOTES.md "Loss scaling": workers push gradients of the *summed* loss; whoever
// applies the update (the standalone trainer, or the parameter server for its shard) calls this
// once per step, so N workers with B/N examples each give exactly the update of one worker with B.
#pragma once

#include <cstddef>
#include <cstdint>

#include "common/engine/param_layout.h"

namespace pstrain::nn {

// grads[i] = grads[i] / examples + 2 * l2 * params[i] for one tensor (or a slice of one).
template <typename T>
void scale_and_regularize(T* grads, const T* params, size_t n, int64_t examples, float l2) {
  const T inv = T(1) / static_cast<T>(examples);
  if (l2 == 0.0f) {
    for (size_t i = 0; i < n; ++i) grads[i] *= inv;
  } else {
    const T two_l2 = T(2) * static_cast<T>(l2);
    for (size_t i = 0; i < n; ++i) grads[i] = grads[i] * inv + two_l2 * params[i];
  }
}

// The same for every dense tensor of a layout (a sparse table's gradient is compact: its owner
// scales it with the function above).
template <typename T>
void scale_and_regularize(const ParamLayout& layout, T* grads, const T* params, int64_t examples) {
  for (const ParamInfo& p : layout.params()) {
    if (p.sparse) continue;
    scale_and_regularize(grads + p.offset, params + p.offset, p.size, examples, p.l2);
  }
}

// The same over the layout's positions [begin, end) only (a block of the flat gradient): each
// value gets exactly what the whole-layout call gives it.
template <typename T>
void scale_and_regularize(const ParamLayout& layout, T* grads, const T* params, int64_t examples, size_t begin,
                          size_t end) {
  for (const ParamInfo& p : layout.params()) {
    if (p.sparse || p.offset >= end || p.offset + p.size <= begin) continue;
    const size_t from = p.offset > begin ? p.offset : begin;
    const size_t to = p.offset + p.size < end ? p.offset + p.size : end;
    scale_and_regularize(grads + from, params + from, to - from, examples, p.l2);
  }
}

// sum over kernels of l2 * ||w||^2: the regularisation term of the reported loss.
template <typename T>
double regularization_loss(const ParamLayout& layout, const T* params) {
  double total = 0;
  for (const ParamInfo& p : layout.params()) {
    if (p.l2 == 0.0f) continue;
    double sq = 0;
    for (size_t i = 0; i < p.size; ++i) sq += static_cast<double>(params[p.offset + i]) * params[p.offset + i];
    total += p.l2 * sq;
  }
  return total;
}

}  // namespace pstrain::nn
