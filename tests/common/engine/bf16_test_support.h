// What the bfloat16 product tests share (bf16_conv_test.cc, bf16_matmul_test.cc): the nearest
// bfloat16 of a float, as oneDNN's reorders round, and seeded normal values.
// Thread rules: plain functions.
#pragma once

#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

namespace pstrain::testing {

// Round to the nearest bfloat16 (ties to even), as oneDNN's reorder does.
inline float bf16(float v) {
  uint32_t u;
  std::memcpy(&u, &v, 4);
  u += 0x7FFFu + ((u >> 16) & 1u);
  u &= 0xFFFF0000u;
  float out;
  std::memcpy(&out, &u, 4);
  return out;
}

// n values drawn from N(0, 1) with `seed`.
inline std::vector<float> random_values(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

}  // namespace pstrain::testing
