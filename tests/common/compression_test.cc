#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <ios>
#include <limits>
#include <vector>

#include "common/compression.h"
#include "common/rng.h"

using namespace pstrain;

TEST_CASE("fp16: every finite half survives float and back - infinities and NaN keep their kind") {
  for (uint32_t h = 0; h < 0x10000u; ++h) {
    const uint16_t half = static_cast<uint16_t>(h);
    const float f = half_to_float(half);
    if ((half & 0x7c00u) == 0x7c00u && (half & 0x3ffu) != 0) {
      CHECK(std::isnan(f));
      CHECK(std::isnan(half_to_float(float_to_half(f))));
      continue;
    }
    REQUIRE_MESSAGE(float_to_half(f) == half, "half 0x" << std::hex << h << " -> " << f);
  }
  CHECK(half_to_float(0x3c00u) == 1.0f);
  CHECK(half_to_float(0xc000u) == -2.0f);
  CHECK(half_to_float(0x7bffu) == 65504.0f);
  CHECK(half_to_float(0x0001u) == std::ldexp(1.0f, -24));
  CHECK(float_to_half(std::numeric_limits<float>::infinity()) == 0x7c00u);
  CHECK(float_to_half(-std::numeric_limits<float>::infinity()) == 0xfc00u);
}

TEST_CASE("fp16: ties round to even, everything else to nearest - overflow and underflow") {
  // Between consecutive positive finite halves a < b: the midpoint goes to the even one, a hair
  // above it to b, a hair below to a (normal and subnormal ranges alike).
  for (uint32_t h = 0; h < 0x7bffu; ++h) {
    const float a = half_to_float(static_cast<uint16_t>(h)), b = half_to_float(static_cast<uint16_t>(h + 1));
    const float mid = (a + b) / 2;  // exact: halves have 11 significant bits
    const uint16_t even = (h & 1u) == 0 ? static_cast<uint16_t>(h) : static_cast<uint16_t>(h + 1);
    REQUIRE(float_to_half(mid) == even);
    REQUIRE(float_to_half(std::nextafter(mid, 1e9f)) == h + 1);
    REQUIRE(float_to_half(std::nextafter(mid, -1e9f)) == h);
    REQUIRE(float_to_half(-mid) == (even | 0x8000u));
  }
  CHECK(float_to_half(65519.0f) == 0x7bffu);
  CHECK(float_to_half(65520.0f) == 0x7c00u);  // the tie above the largest half rounds to infinity
  CHECK(float_to_half(1e10f) == 0x7c00u);
  CHECK(float_to_half(std::ldexp(1.0f, -25)) == 0);  // a tie with zero: even
  CHECK(float_to_half(std::nextafter(std::ldexp(1.0f, -25), 1.0f)) == 1);
  CHECK(float_to_half(1e-30f) == 0);
  CHECK(float_to_half(-0.0f) == 0x8000u);
}

TEST_CASE("fp16: encode/decode of a buffer is within half an ulp (2^-11 relative) in the normal range") {
  Rng rng(7);
  std::vector<float> values(4096);
  for (float& v : values) {
    v = rng.uniform_float(-8.0f, 8.0f) * std::ldexp(1.0f, static_cast<int>(rng.uniform_index(25)) - 12);
  }
  std::vector<unsigned char> wire(values.size() * 2);
  encode_half(values, wire.data());
  std::vector<float> back(values.size());
  decode_half(wire.data(), back);
  for (size_t i = 0; i < values.size(); ++i) {
    // Relative in the normal range; below 2^-14 (subnormal halves) half of the spacing 2^-24.
    const float bound = std::max(std::ldexp(std::fabs(values[i]), -11), std::ldexp(1.0f, -25));
    REQUIRE(std::fabs(back[i] - values[i]) <= bound);
  }
  // Little-endian on the wire: 1.0 is 0x3c00.
  const float one = 1.0f;
  unsigned char two[2];
  encode_half({&one, 1}, two);
  CHECK(two[0] == 0x00);
  CHECK(two[1] == 0x3c);
}

TEST_CASE("topk_count: ceil(fraction * n), between 1 and n") {
  CHECK(topk_count(0, 0.5f) == 0);
  CHECK(topk_count(1000, 0.01f) == 10);
  CHECK(topk_count(1001, 0.01f) == 11);
  CHECK(topk_count(10, 0.001f) == 1);
  CHECK(topk_count(10, 1.0f) == 10);
}

TEST_CASE("topk with error feedback, by hand: largest magnitudes sent, the rest carried to the next step") {
  std::vector<float> residual(6, 0.0f);
  std::vector<float> scratch;
  std::vector<uint32_t> indices(2);
  std::vector<float> values(2);
  // Step 1: |g| largest at 4 (-5) and 1 (3); sent in index order; the rest stays.
  const std::vector<float> g1{0.5f, 3.0f, -1.0f, 0.25f, -5.0f, 2.0f};
  topk_with_feedback(g1, residual, indices, values, scratch);
  CHECK(indices == std::vector<uint32_t>{1, 4});
  CHECK(values == std::vector<float>{3.0f, -5.0f});
  CHECK(residual == std::vector<float>{0.5f, 0.0f, -1.0f, 0.25f, 0.0f, 2.0f});
  // Step 2: the residual is added first: entry 5 (2 + 1.5) and entry 2 (-1 - 2) win over the
  // fresh 2.5 at entry 1.
  const std::vector<float> g2{0.0f, 2.5f, -2.0f, 0.0f, 0.0f, 1.5f};
  topk_with_feedback(g2, residual, indices, values, scratch);
  CHECK(indices == std::vector<uint32_t>{2, 5});
  CHECK(values == std::vector<float>{-3.0f, 3.5f});
  CHECK(residual == std::vector<float>{0.5f, 2.5f, 0.0f, 0.25f, 0.0f, 0.0f});
  // Over both steps, sent + residual == the sum of the gradients, entry by entry.
  std::vector<float> sent(6, 0.0f);
  sent[1] += 3.0f, sent[4] += -5.0f, sent[2] += -3.0f, sent[5] += 3.5f;
  for (size_t i = 0; i < 6; ++i) CHECK(sent[i] + residual[i] == g1[i] + g2[i]);
}

TEST_CASE("topk: ties go to the lower index - all entries when k == n") {
  std::vector<float> residual(5, 0.0f);
  std::vector<float> scratch;
  std::vector<uint32_t> indices(2);
  std::vector<float> values(2);
  topk_with_feedback(std::vector<float>{1.0f, -2.0f, 2.0f, 2.0f, -2.0f}, residual, indices, values, scratch);
  CHECK(indices == std::vector<uint32_t>{1, 2});
  CHECK(values == std::vector<float>{-2.0f, 2.0f});
  std::vector<uint32_t> all(5);
  std::vector<float> all_values(5);
  topk_with_feedback(std::vector<float>(5, 0.0f), residual, all, all_values, scratch);
  CHECK(all == std::vector<uint32_t>{0, 1, 2, 3, 4});
  CHECK(all_values == std::vector<float>{1.0f, 0.0f, 0.0f, 2.0f, -2.0f});
  CHECK(residual == std::vector<float>(5, 0.0f));
}

TEST_CASE("fp16: the buffer codecs (vectorised where the CPU can) agree with the scalar conversion on every half") {
  // Every half pattern, and every midpoint between neighbours (ties) and a hair either side.
  std::vector<float> values;
  for (uint32_t h = 0; h < 0x10000u; ++h) {
    const uint16_t half = static_cast<uint16_t>(h);
    if ((half & 0x7c00u) == 0x7c00u && (half & 0x3ffu) != 0) continue;  // NaN: payloads may differ
    const float f = half_to_float(half);
    values.push_back(f);
    if ((half & 0x7fffu) < 0x7bffu) {
      const float next = half_to_float(static_cast<uint16_t>(h + 1));
      const float mid = (f + next) / 2;
      values.insert(values.end(), {mid, std::nextafter(mid, 0.0f), std::nextafter(mid, 2 * mid)});
    }
  }
  values.insert(values.end(), {65519.0f, 65520.0f, 1e10f, -1e10f, std::ldexp(1.0f, -25), 1e-30f});
  std::vector<unsigned char> wire(values.size() * 2);
  encode_half(values, wire.data());
  std::vector<float> back(values.size());
  decode_half(wire.data(), back);
  for (size_t i = 0; i < values.size(); ++i) {
    const uint16_t got = static_cast<uint16_t>(wire[2 * i] | (wire[2 * i + 1] << 8));
    REQUIRE_MESSAGE(got == float_to_half(values[i]), "value " << values[i] << " at " << i);
    REQUIRE(back[i] == half_to_float(got));
  }
}

TEST_CASE("topk: the selection is the first k of (magnitude descending, index ascending), ties and all") {
  Rng rng(11);
  std::vector<float> scratch;
  for (int round = 0; round < 200; ++round) {
    const size_t n = 1 + rng.uniform_index(300);
    const size_t k = 1 + rng.uniform_index(n);
    // Few distinct magnitudes: many ties at the threshold.
    std::vector<float> gradient(n), residual(n);
    for (size_t i = 0; i < n; ++i) {
      gradient[i] = static_cast<float>(static_cast<int>(rng.uniform_index(9)) - 4);
      residual[i] = static_cast<float>(static_cast<int>(rng.uniform_index(3)) - 1);
    }
    std::vector<float> sum(n);
    for (size_t i = 0; i < n; ++i) sum[i] = residual[i] + gradient[i];
    std::vector<uint32_t> want(n);
    for (size_t i = 0; i < n; ++i) want[i] = static_cast<uint32_t>(i);
    std::stable_sort(want.begin(), want.end(),
                     [&](uint32_t a, uint32_t b) { return std::fabs(sum[a]) > std::fabs(sum[b]); });
    want.resize(k);
    std::sort(want.begin(), want.end());
    std::vector<uint32_t> indices(k);
    std::vector<float> values(k);
    topk_with_feedback(gradient, residual, indices, values, scratch);
    REQUIRE(indices == want);
    for (size_t j = 0; j < k; ++j) {
      REQUIRE(values[j] == sum[want[j]]);
      sum[want[j]] = 0.0f;
    }
    REQUIRE(residual == sum);
  }
}
