// Keras' gradient clipping (`clipnorm`, `global_clipnorm`), computed so that a cluster and the
// standalone trainer agree bit for bit (docs/DESIGN-NOTES.md "Gradient clipping").
//
// The norms are taken over a chunk plan (chunk_plan.h), the way a cluster holds the gradient:
// each chunk's sum of squares in double, element by element in order (what a server computes of
// the step it summed), then the chunks' sums added in key order (what every worker does with
// its replies). The factor is limit / max(norm, limit), rounded to float once, and each gradient
// element is multiplied by it (Keras multiplies by limit and divides by the norm: within a
// rounding of ours). batch_norm's moving statistics are not gradients: they count zero and are
// never scaled.
//
// Thread rules: pure functions.
#pragma once

#include <cstddef>
#include <span>
#include <vector>

#include "common/engine/chunk_plan.h"
#include "common/engine/optim/optimizer_spec.h"
#include "common/engine/param_layout.h"

namespace pstrain::nn {

// g[0]^2 + ... + g[n-1]^2, in double, in element order.
double sum_of_squares(const float* g, size_t n);

// True when chunk `c` of `layout` holds a moving statistic (never clipped, counts zero).
bool is_unclipped(const ParamLayout& layout, const ChunkInfo& c);

// Each chunk's clip factor (1 where no clipping is needed), from each chunk's sum of squares
// (sums[i] is chunks[i]'s; the chunks in any order). clipnorm: a chunk's tensor's norm, over the
// tensor's chunks; global_clipnorm: over every chunk. Precondition: optimizer.clips().
std::vector<float> clip_factors(const OptimizerSpec& optimizer, std::span<const ChunkInfo> chunks,
                                std::span<const double> sums);

// g[i] *= factor (nothing when the factor is 1).
void scale_gradient(float* g, size_t n, float factor);

// The standalone trainer's form: clips the flat, finished gradient of `layout` (dense tensors
// only) as a cluster planned by `chunks` would.
void clip_gradient(const OptimizerSpec& optimizer, const ParamLayout& layout, std::span<const ChunkInfo> chunks,
                   float* grads);

}  // namespace pstrain::nn
