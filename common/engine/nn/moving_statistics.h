// The moving statistics of batch_norm layers (batch_norm.h): parameters that the owner of the
// parameters (a parameter server for its chunks, the standalone trainer for the whole buffer)
// sets as moving averages of the batches' statistics instead of letting the optimizer step them.
// The optimizer still runs over them (so its state evolves the same way on a server's chunk and
// in the trainer's whole buffer); its result is then overwritten:
//   moving = momentum * moving + (1 - momentum) * statistic,
// where `statistic` is the tensor's scaled gradient (the ghost batches' statistics weighted by
// their examples, divided by the step's examples). One function for both owners, so they compute
// the same bits.
//
// Thread rules: pure functions.
#pragma once

#include <cstddef>

#include "common/engine/model_spec.h"

namespace pstrain::nn {

inline bool is_moving_statistic(ParamRole role) {
  return role == ParamRole::kMovingMean || role == ParamRole::kMovingVariance;
}

// out[i] = momentum * before[i] + (1 - momentum) * statistic[i]; `out` may be `before`.
void moving_average(const float* before, const float* statistic, size_t n, float momentum, float* out);

// The momentum of a moving-statistic tensor (its batch_norm layer's), or a negative value for
// any other tensor.
float moving_momentum(const ModelSpec& spec, const ParamInfo& param);

}  // namespace pstrain::nn
