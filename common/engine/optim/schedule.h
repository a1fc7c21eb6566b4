// Learning-rate schedules, with Keras' formulas (keras.optimizers.schedules, Keras 3), of the
// optimizer's step t (OptimizerState::iterations before the update, as Keras' optimizer passes its
// `iterations`):
//   constant            the optimizer's learning_rate
//   exponential_decay   initial * decay_rate^(t / decay_steps)   (staircase: floor(t / decay_steps))
//   piecewise_constant  values[0] while t <= boundaries[0], values[i] while boundaries[i-1] < t <=
//                       boundaries[i], values[n] after boundaries[n-1]
//   cosine_decay        without warmup_target: initial * d(min(t, decay_steps)), where
//                       d(s) = (1 - alpha) * 0.5 * (1 + cos(pi * s / decay_steps)) + alpha;
//                       with it: a linear warm-up from initial to warmup_target over warmup_steps,
//                       then warmup_target * d(min(t, warmup_steps + decay_steps) - warmup_steps)
// Computed in double, rounded once to float. Every server applies a chunk's update with the rate
// of that chunk's own step count, which in sync training is the global step on every server and
// after every recovery (the count is in the optimizer state every backup holds), and the
// standalone trainer computes the same: the schedule keeps runs bit for bit equal.
//
// Thread rules: pure functions.
#pragma once

#include <cstdint>

#include "common/engine/optim/optimizer_spec.h"

namespace pstrain::optim {

float learning_rate_at(const OptimizerSpec& spec, int64_t step);

}  // namespace pstrain::optim
