#include "common/engine/nn/gradient_clipping.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>

#include "common/engine/nn/moving_statistics.h"

namespace pstrain::nn {

double sum_of_squares(const float* g, size_t n) {
  double sum = 0;
  for (size_t i = 0; i < n; ++i) sum += static_cast<double>(g[i]) * static_cast<double>(g[i]);
  return sum;
}

bool is_unclipped(const ParamLayout& layout, const ChunkInfo& c) {
  return is_moving_statistic(layout.params()[c.param].role);
}

namespace {

float factor_of(double sum, float limit) {
  const double norm = std::sqrt(sum);
  return norm <= limit ? 1.0f : static_cast<float>(static_cast<double>(limit) / norm);
}

}  // namespace

std::vector<float> clip_factors(const OptimizerSpec& optimizer, std::span<const ChunkInfo> chunks,
                                std::span<const double> sums) {
  std::vector<size_t> by_key(chunks.size());
  std::iota(by_key.begin(), by_key.end(), size_t{0});
  std::sort(by_key.begin(), by_key.end(), [&](size_t a, size_t b) { return chunks[a].key < chunks[b].key; });
  std::vector<float> factors(chunks.size(), 1.0f);
  if (optimizer.global_clipnorm > 0.0f) {
    double total = 0;
    for (const size_t i : by_key) total += sums[i];
    std::fill(factors.begin(), factors.end(), factor_of(total, optimizer.global_clipnorm));
    return factors;
  }
  std::map<uint32_t, double> per_tensor;
  for (const size_t i : by_key) per_tensor[chunks[i].param] += sums[i];
  for (size_t i = 0; i < chunks.size(); ++i) factors[i] = factor_of(per_tensor[chunks[i].param], optimizer.clipnorm);
  return factors;
}

void scale_gradient(float* g, size_t n, float factor) {
  if (factor == 1.0f) return;
  for (size_t i = 0; i < n; ++i) g[i] *= factor;
}

void clip_gradient(const OptimizerSpec& optimizer, const ParamLayout& layout, std::span<const ChunkInfo> chunks,
                   float* grads) {
  std::vector<double> sums(chunks.size(), 0.0);
  const auto start = [&](const ChunkInfo& c) { return grads + layout.params()[c.param].offset + c.offset; };
  for (size_t i = 0; i < chunks.size(); ++i) {
    if (!chunks[i].is_table_piece() && !is_unclipped(layout, chunks[i])) sums[i] = sum_of_squares(start(chunks[i]), chunks[i].size);
  }
  const std::vector<float> factors = clip_factors(optimizer, chunks, sums);
  for (size_t i = 0; i < chunks.size(); ++i) {
    if (!chunks[i].is_table_piece() && !is_unclipped(layout, chunks[i])) scale_gradient(start(chunks[i]), chunks[i].size, factors[i]);
  }
}

}  // namespace pstrain::nn
