#include "common/data/reduce_on_plateau.h"

#include <algorithm>
#include <limits>

namespace pstrain {

std::vector<float> plateau_lr_scales(const ReduceOnPlateauSpec& spec, float learning_rate,
                                     const std::vector<std::optional<double>>& values) {
  float lr = learning_rate;
  double best = spec.maximize ? -std::numeric_limits<double>::infinity() : std::numeric_limits<double>::infinity();
  int64_t wait = 0, cooldown_left = 0;
  std::vector<float> scales{1.0f};
  for (const std::optional<double>& v : values) {
    if (v) {
      if (cooldown_left > 0) {
        --cooldown_left;
        wait = 0;
      }
      const bool improved = spec.maximize ? *v > best + spec.min_delta : *v < best - spec.min_delta;
      if (improved) {
        best = *v;
        wait = 0;
      } else if (cooldown_left == 0 && ++wait >= spec.patience && lr > static_cast<float>(spec.min_lr)) {
        lr = static_cast<float>(std::max(static_cast<double>(lr) * spec.factor, spec.min_lr));
        cooldown_left = spec.cooldown;
        wait = 0;
      }
    }
    scales.push_back(static_cast<float>(static_cast<double>(lr) / static_cast<double>(learning_rate)));
  }
  return scales;
}

}  // namespace pstrain
