#include "common/engine/compression.h"

#include "common/base/rng.h"
#include "common/engine/simd/kernels.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <functional>

namespace pstrain {
namespace {

uint32_t bits_of(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

float float_of(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

}  // namespace

uint16_t float_to_half(float value) noexcept {
  const uint32_t x = bits_of(value);
  const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
  const uint32_t abs = x & 0x7fffffffu;
  if (abs > 0x7f800000u) return sign | 0x7e00u | static_cast<uint16_t>((abs >> 13) & 0x3ffu);  // NaN stays NaN
  if (abs >= 0x47800000u) return sign | 0x7c00u;  // >= 65536 (and infinity): infinity
  if (abs < 0x38800000u) {
    // Below 2^-14: a subnormal half (or zero), m * 2^-24, rounded to nearest even.
    const uint32_t exponent = abs >> 23;
    if (exponent < 102) return sign;  // below 2^-25: rounds to zero (2^-25 itself ties to even zero)
    const uint32_t mantissa = (abs & 0x7fffffu) | 0x800000u;
    const uint32_t shift = 126 - exponent;  // 14 .. 24
    uint32_t result = mantissa >> shift;
    const uint32_t rest = mantissa & ((1u << shift) - 1), halfway = 1u << (shift - 1);
    if (rest > halfway || (rest == halfway && (result & 1u) != 0)) ++result;  // may carry into the smallest normal
    return sign | static_cast<uint16_t>(result);
  }
  // Normal: rebias the exponent (127 -> 15) and round the 13 dropped bits to nearest even; a
  // carry moves into the exponent, up to infinity for [65520, 65536).
  const uint32_t odd = (abs >> 13) & 1u;
  const uint32_t rounded = abs + 0xc8000fffu + odd;
  return sign | static_cast<uint16_t>(rounded >> 13);
}

float half_to_float(uint16_t half) noexcept {
  const uint32_t sign = static_cast<uint32_t>(half & 0x8000u) << 16;
  const uint32_t exponent = (half >> 10) & 0x1fu, mantissa = half & 0x3ffu;
  if (exponent == 0) {
    const float magnitude = std::ldexp(static_cast<float>(mantissa), -24);  // exact
    return float_of(sign | bits_of(magnitude));
  }
  if (exponent == 31) return float_of(sign | 0x7f800000u | (mantissa << 13));
  return float_of(sign | ((exponent + 112) << 23) | (mantissa << 13));
}

void encode_half(std::span<const float> values, unsigned char* out) {
  simd::kernels().floats_to_halves(static_cast<int64_t>(values.size()), values.data(), out);
}

void decode_half(const unsigned char* in, std::span<float> out) {
  simd::kernels().halves_to_floats(static_cast<int64_t>(out.size()), in, out.data());
}

uint16_t float_to_bfloat16(float value) {
  const uint32_t x = bits_of(value);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x0040u);  // a quiet NaN
  // Round the 16 dropped bits to nearest even; a carry moves into the exponent (up to infinity
  // from just below float32's largest finite values, as float32 arithmetic would round).
  return static_cast<uint16_t>((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

float bfloat16_to_float(uint16_t value) { return float_of(static_cast<uint32_t>(value) << 16); }

void encode_bfloat16(std::span<const float> values, unsigned char* out) {
  // One branch-free expression per value (the NaN test a select), which the compiler vectorizes.
  for (size_t i = 0; i < values.size(); ++i) {
    const uint16_t b = float_to_bfloat16(values[i]);
    out[2 * i] = static_cast<unsigned char>(b & 0xffu);
    out[2 * i + 1] = static_cast<unsigned char>(b >> 8);
  }
}

void decode_bfloat16(const unsigned char* in, std::span<float> out) {
  simd::kernels().bf16_to_floats(static_cast<int64_t>(out.size()), in, out.data());
}

void encode_rounded_bfloat16(std::span<const float> values, unsigned char* out) {
  simd::kernels().floats_to_bf16(static_cast<int64_t>(values.size()), values.data(), out);
}

size_t topk_count(size_t n, float fraction) {
  if (n == 0) return 0;
  const double k = std::ceil(static_cast<double>(fraction) * static_cast<double>(n));
  return std::clamp<size_t>(static_cast<size_t>(std::max(k, 1.0)), 1, n);
}

void topk_with_feedback(std::span<const float> gradient, std::span<float> residual, std::span<uint32_t> indices,
                        std::span<float> values, std::vector<float>& scratch) {
  const size_t n = residual.size(), k = indices.size();
  if (k == 0) {
    for (size_t i = 0; i < n; ++i) residual[i] += gradient[i];
    return;
  }
  // magnitudes[i] (NaN as infinity), and a copy that nth_element reorders to find the k-th largest.
  scratch.resize(2 * n);
  float* magnitudes = scratch.data();
  float* order = scratch.data() + n;
  for (size_t i = 0; i < n; ++i) {
    residual[i] += gradient[i];
    const float m = std::fabs(residual[i]);
    magnitudes[i] = std::isnan(m) ? std::numeric_limits<float>::infinity() : m;
    order[i] = magnitudes[i];
  }
  std::nth_element(order, order + (k - 1), order + n, std::greater<float>());
  const float threshold = order[k - 1];
  // Everything above the threshold, and as many entries equal to it as fill k, lowest index first:
  // the selection of the order (magnitude descending, index ascending), in one pass, ascending.
  size_t above = 0;
  for (size_t i = 0; i < n; ++i) above += magnitudes[i] > threshold ? 1 : 0;
  size_t ties = k - above, j = 0;
  for (size_t i = 0; i < n && j < k; ++i) {
    if (magnitudes[i] > threshold || (magnitudes[i] == threshold && ties > 0)) {
      if (magnitudes[i] == threshold) --ties;
      indices[j] = static_cast<uint32_t>(i);
      values[j] = residual[i];
      residual[i] = 0.0f;
      ++j;
    }
  }
}

size_t powersgd_rank(size_t rows, size_t columns, uint32_t rank) {
  const size_t r = std::min<size_t>({rank, rows, columns});
  if (r == 0 || (rows + columns) * r >= rows * columns) return 0;
  return r;
}

void powersgd_initial_q(uint64_t seed, std::span<float> q) {
  Rng rng(seed);
  for (float& x : q) x = rng.uniform_float(-1.0f, 1.0f);
}

void orthogonalize_columns(std::span<float> p, size_t rows, size_t rank) {
  // A column whose norm after the projections is below this fraction of its norm before them is
  // (numerically) in the span of the previous ones: zeroed rather than blown up to noise.
  constexpr double kRelativeFloor = 1e-6;
  for (size_t j = 0; j < rank; ++j) {
    double before = 0.0;
    for (size_t i = 0; i < rows; ++i) before += static_cast<double>(p[i * rank + j]) * p[i * rank + j];
    for (size_t k = 0; k < j; ++k) {
      double dot = 0.0;
      for (size_t i = 0; i < rows; ++i) dot += static_cast<double>(p[i * rank + j]) * p[i * rank + k];
      for (size_t i = 0; i < rows; ++i) {
        p[i * rank + j] = static_cast<float>(p[i * rank + j] - dot * p[i * rank + k]);
      }
    }
    double norm = 0.0;
    for (size_t i = 0; i < rows; ++i) norm += static_cast<double>(p[i * rank + j]) * p[i * rank + j];
    norm = std::sqrt(norm);
    const bool degenerate = !(norm > 0.0) || !(norm > kRelativeFloor * std::sqrt(before)) || !std::isfinite(norm);
    for (size_t i = 0; i < rows; ++i) {
      p[i * rank + j] = degenerate ? 0.0f : static_cast<float>(p[i * rank + j] / norm);
    }
  }
}

namespace {

// sum of a[c] * b[c]: 16 lanes, each summed in order, then the lanes in order (vectorizes with
// no reassociation the compiler would need fast-math for; the same bits on every call).
float dot(const float* a, const float* b, size_t n) {
  constexpr size_t kLanes = 16;
  float lanes[kLanes] = {};
  size_t c = 0;
  for (; c + kLanes <= n; c += kLanes) {
    for (size_t l = 0; l < kLanes; ++l) lanes[l] += a[c + l] * b[c + l];
  }
  float sum = 0.0f;
  for (; c < n; ++c) sum += a[c] * b[c];
  for (size_t l = 0; l < kLanes; ++l) sum += lanes[l];
  return sum;
}

}  // namespace

void low_rank_product(std::span<const float> p, std::span<const float> q, size_t rows, size_t columns, size_t rank,
                      std::span<float> out) {
  for (size_t i = 0; i < rows; ++i) {
    const float* pi = p.data() + i * rank;
    float* row = out.data() + i * columns;
    for (size_t c = 0; c < columns; ++c) row[c] = 0.0f;
    for (size_t j = 0; j < rank; ++j) {
      const float x = pi[j];
      const float* qj = q.data() + j * columns;
      for (size_t c = 0; c < columns; ++c) row[c] += x * qj[c];
    }
  }
}

void powersgd_with_feedback(std::span<const float> gradient, std::span<float> residual, size_t rows, size_t columns,
                            size_t rank, std::span<float> q, std::span<float> p_out, std::span<float> q_out,
                            std::vector<float>& scratch) {
  const size_t n = rows * columns;
  // M = gradient + residual, kept in `residual` until the end.
  for (size_t i = 0; i < n; ++i) residual[i] += gradient[i];
  const float* m = residual.data();
  // P = M Q: one dot product of a row of M and a row of Q^T per entry.
  for (size_t i = 0; i < rows; ++i) {
    for (size_t j = 0; j < rank; ++j) p_out[i * rank + j] = dot(m + i * columns, q.data() + j * columns, columns);
  }
  orthogonalize_columns(p_out, rows, rank);
  // Q^T = P^T M: row j of it is the sum over rows i of P[i, j] times row i of M, in row order.
  std::fill(q_out.begin(), q_out.end(), 0.0f);
  for (size_t i = 0; i < rows; ++i) {
    const float* row = m + i * columns;
    for (size_t j = 0; j < rank; ++j) {
      const float x = p_out[i * rank + j];
      float* qj = q_out.data() + j * columns;
      for (size_t c = 0; c < columns; ++c) qj[c] += x * row[c];
    }
  }
  // residual = M - P Q^T, row by row, with the receiver's own product (the same bits it adds).
  scratch.resize(columns);
  for (size_t i = 0; i < rows; ++i) {
    low_rank_product(p_out.subspan(i * rank, rank), q_out, 1, columns, rank, scratch);
    float* row = residual.data() + i * columns;
    for (size_t c = 0; c < columns; ++c) row[c] -= scratch[c];
  }
  // The warm start of the next step: the new Q, but a column whose P column is zero keeps its old
  // values (a zero column of Q would give a zero column of P forever after).
  for (size_t j = 0; j < rank; ++j) {
    bool zero = true;
    for (size_t i = 0; i < rows && zero; ++i) zero = p_out[i * rank + j] == 0.0f;
    if (zero) continue;
    std::copy_n(q_out.begin() + static_cast<std::ptrdiff_t>(j * columns), columns,
                q.begin() + static_cast<std::ptrdiff_t>(j * columns));
  }
}

}  // namespace pstrain
