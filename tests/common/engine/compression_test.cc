#include <doctest/doctest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <ios>
#include <limits>
#include <vector>

#include "common/engine/compression.h"
#include "common/engine/simd/bf16_product.h"
#include "common/engine/simd/kernels.h"
#include "common/base/rng.h"

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

TEST_CASE("bf16: every bfloat16 survives float and back - NaN stays a quiet NaN of its sign") {
  for (uint32_t b = 0; b < 0x10000u; ++b) {
    const uint16_t value = static_cast<uint16_t>(b);
    const float f = bfloat16_to_float(value);
    if ((value & 0x7f80u) == 0x7f80u && (value & 0x7fu) != 0) {
      REQUIRE(std::isnan(f));
      const uint16_t back = float_to_bfloat16(f);
      REQUIRE(std::isnan(bfloat16_to_float(back)));
      REQUIRE((back & 0x8040u) == ((value & 0x8000u) | 0x0040u));  // sign kept, quiet bit set
      continue;
    }
    REQUIRE_MESSAGE(float_to_bfloat16(f) == value, "bfloat16 0x" << std::hex << b << " -> " << f);
  }
  CHECK(bfloat16_to_float(0x3f80u) == 1.0f);
  CHECK(bfloat16_to_float(0xc000u) == -2.0f);
  CHECK(bfloat16_to_float(0x0001u) == std::ldexp(1.0f, -133));  // the smallest subnormal
  // A signalling NaN whose payload sits only in the dropped bits still comes out a NaN.
  float signalling;
  const uint32_t bits = 0x7f800001u;
  std::memcpy(&signalling, &bits, sizeof signalling);
  CHECK(std::isnan(bfloat16_to_float(float_to_bfloat16(signalling))));
  CHECK(float_to_bfloat16(std::numeric_limits<float>::infinity()) == 0x7f80u);
  CHECK(float_to_bfloat16(-std::numeric_limits<float>::infinity()) == 0xff80u);
}

TEST_CASE("bf16: ties round to even, everything else to nearest - up to infinity, subnormals alike") {
  // Between consecutive positive finite bfloat16 values a < b: the midpoint (exact in float32:
  // 9 significant bits) goes to the even one, the next float above it to b, below it to a.
  for (uint32_t b = 0; b < 0x7f7fu; ++b) {
    const float lo = bfloat16_to_float(static_cast<uint16_t>(b)), hi = bfloat16_to_float(static_cast<uint16_t>(b + 1));
    const float mid = lo / 2 + hi / 2;  // exact (halving a float is, these are far from underflow's end)
    const uint16_t even = (b & 1u) == 0 ? static_cast<uint16_t>(b) : static_cast<uint16_t>(b + 1);
    REQUIRE(float_to_bfloat16(mid) == even);
    REQUIRE(float_to_bfloat16(std::nextafter(mid, std::numeric_limits<float>::infinity())) == b + 1);
    REQUIRE(float_to_bfloat16(std::nextafter(mid, 0.0f)) == b);
    REQUIRE(float_to_bfloat16(-mid) == (even | 0x8000u));
  }
  // Above the largest finite bfloat16 (0x7f7f): its tie with infinity and beyond round to infinity.
  CHECK(float_to_bfloat16(std::numeric_limits<float>::max()) == 0x7f80u);
  CHECK(float_to_bfloat16(std::nextafter(bfloat16_to_float(0x7f7fu), 0.0f)) == 0x7f7fu);
  CHECK(float_to_bfloat16(-0.0f) == 0x8000u);
  CHECK(float_to_bfloat16(std::numeric_limits<float>::denorm_min()) == 0);  // below half the smallest: zero
}

TEST_CASE("bf16: a buffer's encode/decode is the scalar conversion, within 2^-8 relative, little-endian") {
  Rng rng(11);
  std::vector<float> values(4099);
  for (float& v : values) {
    v = rng.uniform_float(-8.0f, 8.0f) * std::ldexp(1.0f, static_cast<int>(rng.uniform_index(200)) - 100);
  }
  values[0] = std::numeric_limits<float>::quiet_NaN();
  values[1] = -std::numeric_limits<float>::infinity();
  std::vector<unsigned char> wire(values.size() * 2);
  encode_bfloat16(values, wire.data());
  std::vector<float> back(values.size());
  decode_bfloat16(wire.data(), back);
  CHECK(std::isnan(back[0]));
  CHECK(back[1] == -std::numeric_limits<float>::infinity());
  for (size_t i = 2; i < values.size(); ++i) {
    REQUIRE(back[i] == bfloat16_to_float(float_to_bfloat16(values[i])));
    // Half of an 8-significant-bit ulp: at most 2^-8 of the value (2^-9 at the power of two below).
    REQUIRE(std::fabs(back[i] - values[i]) <= std::ldexp(std::fabs(values[i]), -8));
  }
  const float one = 1.0f;
  unsigned char two[2];
  encode_bfloat16({&one, 1}, two);
  CHECK(two[0] == 0x80);
  CHECK(two[1] == 0x3f);
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
  // The codec (the active level's kernels), then every level's kernels this CPU runs, at an odd
  // offset (unaligned halves) and an odd count (the vector body's remainder).
  auto check = [&](auto encode, auto decode) {
    std::vector<unsigned char> wire(values.size() * 2 + 1);
    encode(values.size() - 1, values.data() + 1, wire.data() + 1);
    std::vector<float> back(values.size() - 1);
    decode(back.size(), wire.data() + 1, back.data());
    for (size_t i = 0; i + 1 < values.size(); ++i) {
      const uint16_t got = static_cast<uint16_t>(wire[2 * i + 1] | (wire[2 * i + 2] << 8));
      REQUIRE_MESSAGE(got == float_to_half(values[i + 1]), "value " << values[i + 1] << " at " << i);
      REQUIRE(back[i] == half_to_float(got));
    }
  };
  check([](size_t n, const float* in, unsigned char* out) { encode_half({in, n}, out); },
        [](size_t n, const unsigned char* in, float* out) { decode_half(in, {out, n}); });
  for (const simd::CpuTarget t : {simd::CpuTarget::kGeneric, simd::CpuTarget::kX86_64, simd::CpuTarget::kX86_64_V3, simd::CpuTarget::kX86_64_V4}) {
    const simd::KernelTable* table = simd::kernels_for(t);
    if (table == nullptr) continue;
    INFO("level " << static_cast<int>(t));
    check([&](size_t n, const float* in, unsigned char* out) { table->floats_to_halves(static_cast<int64_t>(n), in, out); },
          [&](size_t n, const unsigned char* in, float* out) { table->halves_to_floats(static_cast<int64_t>(n), in, out); });
  }
}

TEST_CASE("rounded bf16 replies: every level's codec rounds as bf16_round (denormals to signed zeros), back exactly") {
  // Every bfloat16 pattern's value, the midpoints between neighbours (ties) and a hair either side,
  // float32's denormals and the edges around them, infinities and NaNs; then random bit patterns.
  std::vector<float> values;
  for (uint32_t h = 0; h < 0x10000u; ++h) {
    const float f = std::bit_cast<float>(h << 16);
    values.push_back(f);
    if ((h & 0x7f80u) != 0x7f80u) {
      const float mid = std::bit_cast<float>((h << 16) | 0x8000u);
      values.insert(values.end(), {mid, std::bit_cast<float>((h << 16) | 0x7fffu), std::bit_cast<float>((h << 16) | 0x8001u)});
    }
  }
  for (const uint32_t bits : {0x00000001u, 0x007fffffu, 0x807fffffu, 0x00800000u, 0x007f8000u, 0x7f7fffffu, 0x7f800001u,
                              0xffc00001u}) {
    values.push_back(std::bit_cast<float>(bits));
  }
  Rng rng(53);
  for (int i = 0; i < 100000; ++i) values.push_back(std::bit_cast<float>(static_cast<uint32_t>(rng.next_u64())));
  auto same = [](float a, float b) { return std::bit_cast<uint32_t>(a) == std::bit_cast<uint32_t>(b); };
  // At an odd offset (unaligned) and an odd count (the vector body's remainder).
  auto check = [&](auto encode, auto decode) {
    std::vector<unsigned char> wire(values.size() * 2 + 1);
    encode(values.size() - 1, values.data() + 1, wire.data() + 1);
    std::vector<float> back(values.size() - 1);
    decode(back.size(), wire.data() + 1, back.data());
    size_t denormals = 0, wrong = 0, first_wrong = 0;
    for (size_t i = 0; i + 1 < values.size(); ++i) {
      const float x = values[i + 1];
      const uint16_t got = static_cast<uint16_t>(wire[2 * i + 1] | (wire[2 * i + 2] << 8));
      bool ok = got == simd::bf16_round(x) && same(back[i], std::bit_cast<float>(static_cast<uint32_t>(got) << 16));
      // Rounding the decoded value again changes nothing: a worker's products see the same bits.
      ok = ok && simd::bf16_round(back[i]) == got;
      if (x != 0.0f && std::fabs(x) < std::numeric_limits<float>::min()) {
        ++denormals;
        ok = ok && back[i] == 0.0f && std::signbit(back[i]) == std::signbit(x);
      }
      if (!ok && wrong++ == 0) first_wrong = i + 1;
    }
    REQUIRE_MESSAGE(wrong == 0, wrong << " wrong, the first value bits " << std::hex
                                      << std::bit_cast<uint32_t>(values[first_wrong]));
    REQUIRE(denormals > 100);
  };
  check([](size_t n, const float* in, unsigned char* out) { encode_rounded_bfloat16({in, n}, out); },
        [](size_t n, const unsigned char* in, float* out) { decode_bfloat16(in, {out, n}); });
  int levels = 0;
  for (const simd::CpuTarget t : {simd::CpuTarget::kGeneric, simd::CpuTarget::kX86_64, simd::CpuTarget::kX86_64_V3, simd::CpuTarget::kX86_64_V4}) {
    const simd::KernelTable* table = simd::kernels_for(t);
    if (table == nullptr) continue;
    ++levels;
    INFO("level " << static_cast<int>(t));
    check([&](size_t n, const float* in, unsigned char* out) { table->floats_to_bf16(static_cast<int64_t>(n), in, out); },
          [&](size_t n, const unsigned char* in, float* out) { table->bf16_to_floats(static_cast<int64_t>(n), in, out); });
  }
  REQUIRE(levels >= 2);
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

TEST_CASE("powersgd_rank: min(rank, rows, columns), 0 when the factors would not be smaller") {
  CHECK(powersgd_rank(100, 128, 4) == 4);
  CHECK(powersgd_rank(10, 10, 4) == 4);   // (10 + 10) * 4 = 80 < 100
  CHECK(powersgd_rank(10, 10, 5) == 0);   // 100 floats either way: dense
  CHECK(powersgd_rank(2, 1000, 4) == 0);  // min is 2, (2 + 1000) * 2 > 2000
  CHECK(powersgd_rank(3, 1000, 1) == 1);
  CHECK(powersgd_rank(0, 10, 4) == 0);
}

TEST_CASE("powersgd: a rank-1 matrix is reproduced exactly with rank 1, nothing left in the residual") {
  // M = u v^T with u = (1, 1, 1, 1), v = (3, -1, 2); Q = (1, 0, 0): P = M Q = (3, 3, 3, 3), norm 6,
  // so P = (0.5, 0.5, 0.5, 0.5); Q = M^T P = 2 v = (6, -2, 4); P Q^T = M (every step exact).
  const std::vector<float> m{3, -1, 2, 3, -1, 2, 3, -1, 2, 3, -1, 2};
  std::vector<float> residual(12, 0.0f), q{1.0f, 0.0f, 0.0f}, p_out(4), q_out(3);
  std::vector<float> scratch;
  powersgd_with_feedback(m, residual, 4, 3, 1, q, p_out, q_out, scratch);
  CHECK(p_out == std::vector<float>{0.5f, 0.5f, 0.5f, 0.5f});
  CHECK(q_out == std::vector<float>{6.0f, -2.0f, 4.0f});
  CHECK(residual == std::vector<float>(12, 0.0f));
  CHECK(q == q_out);  // the next step's warm start
  std::vector<float> back(12);
  low_rank_product(p_out, q_out, 4, 3, 1, back);
  CHECK(back == m);
}

TEST_CASE("powersgd: orthogonalization by hand - orthonormal columns, a dependent or zero column becomes zero") {
  // Columns (2, 0, 0, 0) and (5, 3, 4, 0): the first normalized to e1, the second loses its e1
  // part (5) and is (0, 3, 4, 0) / 5.
  std::vector<float> p{2, 5, 0, 3, 0, 4, 0, 0};  // row-major 4 x 2
  orthogonalize_columns(p, 4, 2);
  CHECK(p[0] == 1.0f);
  CHECK(p[2] == 0.0f);
  CHECK(p[1] == 0.0f);
  CHECK(p[3] == doctest::Approx(0.6));
  CHECK(p[5] == doctest::Approx(0.8));
  CHECK(p[7] == 0.0f);
  // (1, 2, 0) and 2 x that: the second is in the first's span; a zero column stays zero.
  std::vector<float> dependent{1, 2, 0, 2, 4, 0, 0, 0, 0};  // 3 x 3: columns (1,2,0), (2,4,0), (0,0,0)
  orthogonalize_columns(dependent, 3, 3);
  CHECK(dependent[0] == doctest::Approx(1 / std::sqrt(5.0)));
  CHECK(dependent[3] == doctest::Approx(2 / std::sqrt(5.0)));
  for (const size_t i : {1, 4, 7, 2, 5, 8}) CHECK(dependent[i] == 0.0f);
  // Random 20 x 5: P^T P is the identity.
  Rng rng(5);
  std::vector<float> r(100);
  for (float& x : r) x = rng.uniform_float(-1.0f, 1.0f);
  orthogonalize_columns(r, 20, 5);
  for (size_t a = 0; a < 5; ++a) {
    for (size_t b = 0; b < 5; ++b) {
      double dot = 0.0;
      for (size_t i = 0; i < 20; ++i) dot += static_cast<double>(r[i * 5 + a]) * r[i * 5 + b];
      CHECK(dot == doctest::Approx(a == b ? 1.0 : 0.0).epsilon(1e-5));
    }
  }
}

TEST_CASE("powersgd: error feedback sends next step what this one could not") {
  // M = diag(3, 4), Q = (1, 1): P = (3, 4) / 5 = (0.6, 0.8), Q = M^T P = (1.8, 3.2),
  // P Q^T = [[1.08, 1.92], [1.44, 2.56]], residual = [[1.92, -1.92], [-1.44, 1.44]].
  std::vector<float> residual(4, 0.0f), q{1.0f, 1.0f}, p_out(2), q_out(2);
  std::vector<float> scratch;
  powersgd_with_feedback(std::vector<float>{3, 0, 0, 4}, residual, 2, 2, 1, q, p_out, q_out, scratch);
  CHECK(p_out[0] == doctest::Approx(0.6));
  CHECK(p_out[1] == doctest::Approx(0.8));
  CHECK(q_out[0] == doctest::Approx(1.8));
  CHECK(q_out[1] == doctest::Approx(3.2));
  const std::vector<double> want{1.92, -1.92, -1.44, 1.44};
  for (size_t i = 0; i < 4; ++i) CHECK(residual[i] == doctest::Approx(want[i]).epsilon(1e-5));
  // A zero gradient next: M is the residual, (1.92, -1.44)^T (1, -1), rank 1; the warm Q
  // (1.8, 3.2) finds it: P = -(0.8, -0.6), Q = M^T P = (-2.4, 2.4), and P Q^T is all of it.
  const std::vector<float> p1 = p_out, q1 = q_out;
  powersgd_with_feedback(std::vector<float>(4, 0.0f), residual, 2, 2, 1, q, p_out, q_out, scratch);
  CHECK(p_out[0] == doctest::Approx(-0.8));
  CHECK(p_out[1] == doctest::Approx(0.6));
  CHECK(q_out[0] == doctest::Approx(-2.4));
  CHECK(q_out[1] == doctest::Approx(2.4));
  for (size_t i = 0; i < 4; ++i) CHECK(std::fabs(residual[i]) < 1e-5f);
  // Sent over both steps: the first gradient.
  std::vector<float> a(4), b(4);
  low_rank_product(p1, q1, 2, 2, 1, a);
  low_rank_product(p_out, q_out, 2, 2, 1, b);
  const std::vector<double> g{3, 0, 0, 4};
  for (size_t i = 0; i < 4; ++i) CHECK(a[i] + b[i] == doctest::Approx(g[i]).epsilon(1e-5));
  // An all-zero M (zero gradient, empty residual): P is zero, nothing is sent, and the warm start
  // keeps its Q (a zero Q would give a zero P forever after).
  std::vector<float> empty(4, 0.0f), warm{1.8f, 3.2f};
  powersgd_with_feedback(std::vector<float>(4, 0.0f), empty, 2, 2, 1, warm, p_out, q_out, scratch);
  CHECK(p_out == std::vector<float>{0.0f, 0.0f});
  CHECK(q_out == std::vector<float>{0.0f, 0.0f});
  CHECK(warm == std::vector<float>{1.8f, 3.2f});
  CHECK(empty == std::vector<float>(4, 0.0f));
}

TEST_CASE("powersgd: over many steps, sent + residual == the sum of the gradients - and the same inputs give the same bits") {
  Rng rng(21);
  const size_t rows = 12, columns = 9, rank = 2;
  std::vector<float> q(columns * rank), q2;
  powersgd_initial_q(99, q);
  q2 = q;
  std::vector<float> initial_again(columns * rank);
  powersgd_initial_q(99, initial_again);
  CHECK(initial_again == q);
  powersgd_initial_q(100, initial_again);
  CHECK(initial_again != q);
  for (const float x : q) CHECK((x >= -1.0f && x < 1.0f));
  std::vector<float> residual(rows * columns, 0.0f), residual2 = residual, p(rows * rank), qo(columns * rank);
  std::vector<float> p2 = p, qo2 = qo, product(rows * columns);
  std::vector<double> sum(rows * columns, 0.0), sent(rows * columns, 0.0);
  std::vector<float> scratch, scratch2;
  double first_residual = 0.0, last_residual = 0.0;
  for (int step = 0; step < 30; ++step) {
    std::vector<float> g(rows * columns);
    for (float& x : g) x = rng.uniform_float(-1.0f, 1.0f);
    for (size_t i = 0; i < g.size(); ++i) sum[i] += g[i];
    powersgd_with_feedback(g, residual, rows, columns, rank, q, p, qo, scratch);
    powersgd_with_feedback(g, residual2, rows, columns, rank, q2, p2, qo2, scratch2);
    REQUIRE(p == p2);
    REQUIRE(qo == qo2);
    REQUIRE(residual == residual2);
    low_rank_product(p, qo, rows, columns, rank, product);
    for (size_t i = 0; i < g.size(); ++i) sent[i] += product[i];
    double norm = 0.0;
    for (const float x : residual) norm += static_cast<double>(x) * x;
    (step == 0 ? first_residual : last_residual) = norm;
  }
  for (size_t i = 0; i < sum.size(); ++i) REQUIRE(sent[i] + residual[i] == doctest::Approx(sum[i]).epsilon(1e-4));
  // Error feedback keeps the residual bounded (a compressor that dropped it would not need to).
  CHECK(last_residual < 20 * first_residual);
}
