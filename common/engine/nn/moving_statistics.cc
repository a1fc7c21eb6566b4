#include "common/engine/nn/moving_statistics.h"

namespace pstrain::nn {

void moving_average(const float* before, const float* statistic, size_t n, float momentum, float* out) {
  const float keep = momentum, take = 1.0f - momentum;
  for (size_t i = 0; i < n; ++i) out[i] = keep * before[i] + take * statistic[i];
}

float moving_momentum(const ModelSpec& spec, const ParamInfo& param) {
  if (!is_moving_statistic(param.role)) return -1.0f;
  return spec.layers[static_cast<size_t>(param.layer_index)].momentum;
}

}  // namespace pstrain::nn
