#include "common/engine/optim/schedule.h"

#include <algorithm>
#include <cmath>
#include <numbers>

namespace pstrain {

const char* schedule_kind_name(LearningRateSchedule::Kind kind) {
  switch (kind) {
    case LearningRateSchedule::Kind::kConstant: return "constant";
    case LearningRateSchedule::Kind::kExponentialDecay: return "exponential_decay";
    case LearningRateSchedule::Kind::kPiecewiseConstant: return "piecewise_constant";
    case LearningRateSchedule::Kind::kCosineDecay: return "cosine_decay";
  }
  return "?";
}

namespace optim {
namespace {

double cosine_decayed(const LearningRateSchedule& s, double step, double from) {
  const double fraction = step / static_cast<double>(s.decay_steps);
  const double cosine = 0.5 * (1.0 + std::cos(std::numbers::pi * fraction));
  return from * ((1.0 - s.alpha) * cosine + s.alpha);
}

}  // namespace

float learning_rate_at(const OptimizerSpec& spec, int64_t step) {
  const LearningRateSchedule& s = spec.schedule;
  const auto t = static_cast<double>(step);
  switch (s.kind) {
    case LearningRateSchedule::Kind::kConstant: return spec.learning_rate;
    case LearningRateSchedule::Kind::kExponentialDecay: {
      double p = t / static_cast<double>(s.decay_steps);
      if (s.staircase) p = std::floor(p);
      return static_cast<float>(s.initial_learning_rate * std::pow(s.decay_rate, p));
    }
    case LearningRateSchedule::Kind::kPiecewiseConstant: {
      size_t i = 0;
      while (i < s.boundaries.size() && step > s.boundaries[i]) ++i;
      return static_cast<float>(s.values[i]);
    }
    case LearningRateSchedule::Kind::kCosineDecay: {
      const auto decay = static_cast<double>(s.decay_steps);
      if (!s.warmup_target) return static_cast<float>(cosine_decayed(s, std::min(t, decay), s.initial_learning_rate));
      const auto warmup = static_cast<double>(s.warmup_steps);
      const double at = std::min(t, decay + warmup);
      if (at < warmup) {
        return static_cast<float>((*s.warmup_target - s.initial_learning_rate) * (at / warmup) + s.initial_learning_rate);
      }
      return static_cast<float>(cosine_decayed(s, at - warmup, *s.warmup_target));
    }
  }
  return spec.learning_rate;
}

}  // namespace optim
}  // namespace pstrain
