#include "common/engine/param_layout.h"

#include <Eigen/Dense>
#include <algorithm>
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

// Keras' Orthogonal for a [rows, cols] kernel: the Q of a normal matrix's QR ([max, min], signs
// from R's diagonal), transposed when rows < cols. Normals by Box-Muller from the seeded stream.
void orthogonal_init(const ParamInfo& p, uint64_t seed, float* dst) {
  const int64_t rows = p.shape[0], cols = p.shape[1];
  const int64_t tall = std::max(rows, cols), wide = std::min(rows, cols);
  Rng rng(seed);
  Eigen::MatrixXd a(tall, wide);
  for (int64_t k = 0; k < tall * wide; k += 2) {
    const double u1 = 1.0 - static_cast<double>(rng.uniform_float(0.0f, 1.0f));
    const double u2 = static_cast<double>(rng.uniform_float(0.0f, 1.0f));
    const double radius = std::sqrt(-2.0 * std::log(u1));
    a(k / wide, k % wide) = radius * std::cos(2.0 * M_PI * u2);
    if (k + 1 < tall * wide) a((k + 1) / wide, (k + 1) % wide) = radius * std::sin(2.0 * M_PI * u2);
  }
  const Eigen::HouseholderQR<Eigen::MatrixXd> qr(a);
  Eigen::MatrixXd q = qr.householderQ() * Eigen::MatrixXd::Identity(tall, wide);
  const Eigen::MatrixXd r = qr.matrixQR().topRows(wide).triangularView<Eigen::Upper>();
  for (int64_t c = 0; c < wide; ++c) {
    if (r(c, c) < 0) q.col(c) *= -1.0;
  }
  if (rows < cols) q.transposeInPlace();  // rows x cols
  for (int64_t i = 0; i < rows; ++i) {
    for (int64_t j = 0; j < cols; ++j) dst[i * cols + j] = static_cast<float>(q(i, j));
  }
}

void init_dense_param(const ParamLayout& layout, uint64_t seed, size_t i, float* dst) {
  const ParamInfo& p = layout.params()[i];
  if (p.role == ParamRole::kRecurrentKernel) return orthogonal_init(p, mix_seed(seed, i), dst);
  if (p.role == ParamRole::kCellBias) {
    std::fill(dst, dst + p.size, 0.0f);
    if (p.fan_in > 0) std::fill(dst + p.fan_in, dst + 2 * p.fan_in, 1.0f);  // an LSTM's forget gate
    return;
  }
  if (p.role != ParamRole::kKernel && p.role != ParamRole::kEmbeddings && p.role != ParamRole::kCellKernel) {
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
