#include "common/engine/param_layout.h"

#include <cmath>

#include "common/base/rng.h"

namespace pstrain {

int64_t num_elements(const Shape& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::string shape_string(const Shape& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(shape[i]);
  }
  return s + "]";
}

void ParamLayout::add(ParamInfo info) {
  info.size = static_cast<size_t>(num_elements(info.shape));
  info.offset = (total_size_ + kAlignment - 1) / kAlignment * kAlignment;
  total_size_ = info.offset + info.size;
  params_.push_back(std::move(info));
}

const ParamInfo* ParamLayout::find(const std::string& name) const {
  for (const auto& p : params_) {
    if (p.name == name) return &p;
  }
  return nullptr;
}

void sparse_row_init(const ParamLayout& layout, uint64_t seed, size_t param, int64_t first, int64_t count, float* rows,
                     int64_t stride) {
  const ParamInfo& p = layout.params()[param];
  const int64_t dim = p.shape[1];
  const uint64_t table_seed = mix_seed(seed, param);
  for (int64_t r = 0; r < count; ++r) {
    Rng rng(mix_seed(table_seed, static_cast<uint64_t>(first + r * stride)));
    float* row = rows + r * dim;
    for (int64_t k = 0; k < dim; ++k) row[k] = rng.uniform_float(-0.05f, 0.05f);
  }
}

namespace {

void init_dense_param(const ParamLayout& layout, uint64_t seed, size_t i, float* dst) {
  const ParamInfo& p = layout.params()[i];
  if (p.role != ParamRole::kKernel && p.role != ParamRole::kEmbeddings) {
    std::fill(dst, dst + p.size, p.role == ParamRole::kGamma || p.role == ParamRole::kMovingVariance ? 1.0f : 0.0f);
    return;
  }
  // Embeddings: Keras' default initializer, uniform in [-0.05, 0.05).
  const float limit = p.role == ParamRole::kEmbeddings ? 0.05f
                                                       : std::sqrt(6.0f / static_cast<float>(p.fan_in + p.fan_out));
  Rng rng(mix_seed(seed, i));
  for (size_t k = 0; k < p.size; ++k) dst[k] = rng.uniform_float(-limit, limit);
}

}  // namespace

void glorot_uniform_init(const ParamLayout& layout, uint64_t seed, float* params) {
  dense_glorot_uniform_init(layout, seed, params);
  for (size_t i = layout.dense_count(); i < layout.params().size(); ++i) {
    const ParamInfo& p = layout.params()[i];
    sparse_row_init(layout, seed, i, 0, p.shape[0], params + p.offset);
  }
}

void dense_glorot_uniform_init(const ParamLayout& layout, uint64_t seed, float* params) {
  for (size_t i = 0; i < layout.dense_count(); ++i) init_dense_param(layout, seed, i, params + layout.params()[i].offset);
}

}  // namespace pstrain
