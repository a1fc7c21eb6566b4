// simd::product_bf16 (common/engine/simd/bf16_product.h), mixed precision's dense kernel
// gradient: bf16_round against the wire codec's rounding and its own edge cases; both paths (the
// native VDPBF16PS one where the CPU has AVX512-BF16, and the scalar emulation) bit for bit the
// contract's chain written out term by term, over operands from float32's whole range (denormals,
// underflowing products, infinities), every layout, odd and even k, tails of tiles, accumulation;
// an element's value independent of the block it is computed in and of the thread split; and
// near the float64 product of the rounded operands.
#include <doctest/doctest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "common/engine/compression.h"
#include "common/engine/simd/bf16_product.h"

using namespace pstrain;
using simd::Operand;

namespace {

uint32_t bits_of(float f) { return std::bit_cast<uint32_t>(f); }
float float_of(uint32_t u) { return std::bit_cast<float>(u); }
float widen(uint16_t h) { return float_of(static_cast<uint32_t>(h) << 16); }
float ftz(float x) { return std::fabs(x) < 1.17549435e-38f ? std::copysign(0.0f, x) : x; }

// The contract's step: acc + a * b rounded to 24 bits with an unbounded exponent (in double: exact
// for a bfloat16 product plus a float, then one rounding to float's precision by hand), flushed
// to a signed zero below 2^-126, else that value (the same as float's rounding there).
float step(float a, float b, float acc) {
  const double exact = static_cast<double>(a) * b + acc;  // exact: 16 + 24 bits over < 2^400
  if (exact == 0) return std::fma(a, b, acc);              // +0 or -0 as float arithmetic gives it
  int e = 0;
  const double m = std::frexp(exact, &e);                  // exact = m * 2^e, 0.5 <= |m| < 1
  const double rounded = std::ldexp(std::nearbyint(std::ldexp(m, 24)), e - 24);  // ties to even
  if (std::fabs(rounded) < 0x1p-126) return std::copysign(0.0f, static_cast<float>(exact));
  return static_cast<float>(rounded);
}

// Equal bits, or both NaN (the contract leaves a NaN's payload open).
bool same(float a, float b) { return (std::isnan(a) && std::isnan(b)) || bits_of(a) == bits_of(b); }

// Values with exponents over float32's range (`wide`) or near 1, some of them specials.
std::vector<float> operand(size_t n, uint32_t seed, bool wide) {
  std::mt19937 rng(seed);
  std::vector<float> v(n);
  for (float& x : v) {
    const uint32_t r = rng();
    uint32_t exponent = wide ? rng() % 256 : 120 + rng() % 14;
    if (wide && exponent == 255 && rng() % 4 != 0) exponent = 127;  // infinities and NaNs, but few
    x = float_of((r & 0x807fffffu) | (exponent << 23));
    if (rng() % 16 == 0) x = 0.0f;
  }
  return v;
}

// The contract, term by term: element (i, j) from an operand entry reader.
template <typename A, typename B>
float chain(int64_t k, A a, B b, float start) {
  float acc = ftz(start);
  for (int64_t q = 0; 2 * q < k; ++q) {
    const float a1 = 2 * q + 1 < k ? widen(simd::bf16_round(a(2 * q + 1))) : 0.0f;
    const float b1 = 2 * q + 1 < k ? widen(simd::bf16_round(b(2 * q + 1))) : 0.0f;
    acc = step(a1, b1, acc);
    acc = step(widen(simd::bf16_round(a(2 * q))), widen(simd::bf16_round(b(2 * q))), acc);
  }
  return acc;
}

struct Case {
  int64_t m, n, k;
  bool a_rows_adjacent, b_rows_adjacent, accumulate, wide;
};

// Runs product_bf16 on one case, both paths, and checks each element against the chain.
void check_case(const Case& c, uint32_t seed) {
  // A operand with adjacent rows: entry (i, p) at i + p * (m + 3); else at i * (k + 2) + p.
  const int64_t a_ld = c.a_rows_adjacent ? c.m + 3 : c.k + 2, b_ld = c.b_rows_adjacent ? c.n + 1 : c.k + 5;
  const std::vector<float> a = operand(static_cast<size_t>((c.a_rows_adjacent ? c.k : c.m) * a_ld), seed, c.wide);
  const std::vector<float> b = operand(static_cast<size_t>((c.b_rows_adjacent ? c.k : c.n) * b_ld), seed + 1, c.wide);
  const Operand ao = c.a_rows_adjacent ? Operand{a.data(), 1, a_ld} : Operand{a.data(), a_ld, 1};
  const Operand bo = c.b_rows_adjacent ? Operand{b.data(), 1, b_ld} : Operand{b.data(), b_ld, 1};
  const int64_t ldc = c.m + 2;
  const std::vector<float> start = operand(static_cast<size_t>(ldc * c.n), seed + 2, c.wide);
  for (const bool emulated : {false, true}) {
    std::vector<float> out = start;
    simd::product_bf16(c.m, c.n, c.k, ao, bo, c.accumulate, out.data(), ldc, 1, emulated);
    int64_t wrong = 0;
    for (int64_t j = 0; j < c.n; ++j) {
      for (int64_t i = 0; i < c.m; ++i) {
        const float want = chain(
            c.k, [&](int64_t p) { return a[static_cast<size_t>(i * ao.row + p * ao.step)]; },
            [&](int64_t p) { return b[static_cast<size_t>(j * bo.row + p * bo.step)]; },
            c.accumulate ? start[static_cast<size_t>(j * ldc + i)] : 0.0f);
        if (!same(out[static_cast<size_t>(j * ldc + i)], want)) ++wrong;
      }
      for (int64_t i = c.m; i < ldc; ++i) {  // rows past m untouched
        if (!same(out[static_cast<size_t>(j * ldc + i)], start[static_cast<size_t>(j * ldc + i)])) ++wrong;
      }
    }
    INFO("m " << c.m << " n " << c.n << " k " << c.k << " adjacent rows " << c.a_rows_adjacent << c.b_rows_adjacent
              << " accumulate " << c.accumulate << " wide " << c.wide << " emulated " << emulated);
    CHECK(wrong == 0);
  }
}

}  // namespace

TEST_CASE("bf16_round: to nearest even as the wire codec, denormals to zeros of their sign, NaN stays NaN") {
  std::mt19937 rng(3);
  for (int t = 0; t < 200000; ++t) {
    const float x = float_of(rng());
    const uint16_t got = simd::bf16_round(x);
    if (std::isnan(x)) {
      CHECK(std::isnan(widen(got)));
    } else if (std::fpclassify(x) == FP_SUBNORMAL) {
      CHECK(got == (bits_of(x) >> 16 & 0x8000u));
    } else {
      CHECK(got == float_to_bfloat16(x));
    }
  }
  CHECK(simd::bf16_round(1.0f + 1.0f / 256) == 0x3f80);           // a tie: to even (down)
  CHECK(simd::bf16_round(1.0f + 3.0f / 256) == 0x3f82);           // a tie: to even (up)
  CHECK(simd::bf16_round(float_of(0x7f7fffffu)) == 0x7f80);       // float32's largest: infinity
  CHECK(simd::bf16_round(-1e-40f) == 0x8000);                     // a denormal: -0
  CHECK(simd::bf16_round(float_of(0x00800000u)) == 0x0080);       // the smallest normal stays
  CHECK(std::isnan(widen(simd::bf16_round(float_of(0x7f800001u)))));  // a signalling NaN: not infinity
}

TEST_CASE("product_bf16: the contract's chain bit for bit, native and emulated, every layout, k and tail") {
  const std::string paths = simd::bf16_product_native() ? "yes (both paths checked)" : "no (the emulated path twice)";
  MESSAGE("VDPBF16PS here: " << paths);
  uint32_t seed = 10;
  for (const int64_t k : {1, 2, 3, 8, 17, 64}) {
    for (const bool wide : {false, true}) {
      for (const bool accumulate : {false, true}) {
        check_case({37, 29, k, true, true, accumulate, wide}, seed++);
        check_case({5, 41, k, false, true, accumulate, wide}, seed++);
        check_case({33, 13, k, true, false, accumulate, wide}, seed++);
        check_case({16, 12, k, false, false, accumulate, wide}, seed++);
      }
    }
  }
  check_case({128, 300, 128, true, true, false, false}, 99);  // a kernel gradient's shape: A packed whole
  check_case({300, 40, 64, true, true, true, false}, 100);    // B packed whole
}

TEST_CASE("product_bf16: sums just below float32's smallest normal flush to zero, as VDPBF16PS flushes them") {
  // 2^-126 - 2^-151 - 2^-158: rounded in the denormal range it is 2^-126; rounded with an
  // unbounded exponent it is below 2^-126, and the instruction gives 0.
  const float a[2] = {float_of(0x1A010000u), 0.0f};  // (1 + 2^-7) 2^-75, as term 1 (the odd one)
  const float b[2] = {float_of(0x99800000u), 0.0f};  // -2^-76
  for (const bool emulated : {false, true}) {
    float c = float_of(0x00800000u);  // 2^-126
    simd::product_bf16(1, 1, 2, {a, 2, 1}, {b, 2, 1}, true, &c, 1, 1, emulated);
    CAPTURE(emulated);
    CHECK(bits_of(c) == 0u);
  }
  // Many sums near the boundary: both paths against the contract's chain.
  std::mt19937 rng(21);
  const int64_t n = 4096;
  std::vector<float> as(static_cast<size_t>(n)), bs(as.size()), start(as.size());
  for (int64_t i = 0; i < n; ++i) {
    const uint32_t ea = 40 + rng() % 30;                      // a in [2^-87, 2^-57)
    const uint32_t eb = 102 - ea + rng() % 4;                 // a * b near 2^-152 .. 2^-148
    as[static_cast<size_t>(i)] = float_of((ea << 23) | (rng() & 0x7f0000u));
    bs[static_cast<size_t>(i)] = float_of(0x80000000u | (eb << 23) | (rng() & 0x7f0000u));
    start[static_cast<size_t>(i)] = float_of(0x00800000u + rng() % 4);
  }
  int64_t flushed = 0;
  for (const bool emulated : {false, true}) {
    std::vector<float> c = start;
    int64_t wrong = 0;
    // Row i of A and row i of B give element (i, i): a diagonal of n 1-term sums (k = 1: the pad
    // term goes first, then a * b).
    for (int64_t i = 0; i < n; ++i) {
      simd::product_bf16(1, 1, 1, {&as[static_cast<size_t>(i)], 1, 1}, {&bs[static_cast<size_t>(i)], 1, 1}, true,
                         &c[static_cast<size_t>(i)], 1, 1, emulated);
      const float want = chain(
          1, [&](int64_t) { return as[static_cast<size_t>(i)]; }, [&](int64_t) { return bs[static_cast<size_t>(i)]; },
          start[static_cast<size_t>(i)]);
      wrong += !same(c[static_cast<size_t>(i)], want);
      flushed += !emulated && c[static_cast<size_t>(i)] == 0.0f;
    }
    CAPTURE(emulated);
    CHECK(wrong == 0);
  }
  MESSAGE(flushed << " of " << n << " sums near the boundary flushed to zero");
}

TEST_CASE("product_bf16: an element's value does not depend on its block nor on the threads, and is near float64") {
  const int64_t m = 70, n = 530, k = 45;
  const std::vector<float> a = operand(static_cast<size_t>(m * k), 7, false);
  const std::vector<float> b = operand(static_cast<size_t>(n * k), 8, false);
  std::vector<float> whole(static_cast<size_t>(m * n)), two(whole.size());
  simd::product_bf16(m, n, k, {a.data(), 1, m}, {b.data(), 1, n}, false, whole.data(), m);
  simd::product_bf16(m, n, k, {a.data(), 1, m}, {b.data(), 1, n}, false, two.data(), m, 2);
  CHECK(whole == two);
  // Rows [9, 9 + 23) and columns [101, 101 + 77) alone (a server's rows of a factored push).
  const int64_t i0 = 9, mm = 23, j0 = 101, nn = 77;
  std::vector<float> part(static_cast<size_t>(mm * nn));
  simd::product_bf16(mm, nn, k, {a.data() + i0, 1, m}, {b.data() + j0, 1, n}, false, part.data(), mm);
  int64_t wrong = 0;
  double worst = 0;
  for (int64_t j = 0; j < nn; ++j) {
    for (int64_t i = 0; i < mm; ++i) {
      if (!same(part[static_cast<size_t>(j * mm + i)], whole[static_cast<size_t>((j0 + j) * m + i0 + i)])) ++wrong;
    }
  }
  for (int64_t j = 0; j < n; ++j) {
    for (int64_t i = 0; i < m; ++i) {
      double exact = 0, scale = 0;
      for (int64_t p = 0; p < k; ++p) {
        const double t = static_cast<double>(widen(simd::bf16_round(a[static_cast<size_t>(i + p * m)]))) *
                         widen(simd::bf16_round(b[static_cast<size_t>(j + p * n)]));
        exact += t;
        scale += std::fabs(t);
      }
      worst = std::max(worst, std::fabs(whole[static_cast<size_t>(j * m + i)] - exact) / scale);
    }
  }
  CHECK(wrong == 0);
  MESSAGE("worst error against float64 on the rounded operands, relative to the terms' magnitude: " << worst);
  CHECK(worst < 1e-5);
}

TEST_CASE("round_to_pair_blocks: each value bf16_round's at its place in BA16a<B>b2a, zeros past the matrix, and the "
          "plain copy in the matrix's own order") {
  std::mt19937 rng(31);
  std::uniform_real_distribution<float> uniform(-2.0f, 2.0f);
  for (const auto& [k, n] : std::vector<std::pair<int64_t, int64_t>>{{37, 21}, {64, 64}, {33, 130}, {100, 48}}) {
    for (const int64_t block : {16, 32, 48, 64}) {
      CAPTURE(k);
      CAPTURE(n);
      CAPTURE(block);
      const int64_t ld = n + 3;  // a row stride above the width
      std::vector<float> src(static_cast<size_t>(k * ld));
      for (float& v : src) v = uniform(rng);
      src[5] = 1e-39f;  // a denormal: flushed
      src[7] = std::numeric_limits<float>::quiet_NaN();
      const int64_t row_blocks = (k + 31) / 32, column_blocks = (n + block - 1) / block;
      std::vector<uint32_t> dst(static_cast<size_t>(row_blocks * 32 * column_blocks * block / 2), 0xdeadbeefu);
      std::vector<uint16_t> plain(static_cast<size_t>(k * n), 0xbeefu);
      simd::round_to_pair_blocks(src.data(), k, n, ld, block, dst.data(), plain.data());
      int64_t wrong = 0, wrong_plain = 0;
      for (int64_t nb = 0; nb < column_blocks; ++nb) {
        for (int64_t kb = 0; kb < row_blocks; ++kb) {
          const uint32_t* out = dst.data() + (nb * row_blocks + kb) * 16 * block;
          for (int64_t q = 0; q < 16; ++q) {
            for (int64_t i = 0; i < block; ++i) {
              const int64_t r = kb * 32 + 2 * q, c = nb * block + i;
              const uint32_t lo = r < k && c < n ? simd::bf16_round(src[r * ld + c]) : 0u;
              const uint32_t hi = r + 1 < k && c < n ? simd::bf16_round(src[(r + 1) * ld + c]) : 0u;
              wrong += out[q * block + i] != (lo | (hi << 16));
            }
          }
        }
      }
      for (int64_t r = 0; r < k; ++r) {
        for (int64_t c = 0; c < n; ++c) wrong_plain += plain[r * n + c] != simd::bf16_round(src[r * ld + c]);
      }
      CHECK(wrong == 0);
      CHECK(wrong_plain == 0);
    }
  }
}

TEST_CASE("product_bf16 of an operand already rounded (RoundedRows): the bits of the float32 operand's, native and "
          "emulated, on one thread and two") {
  uint32_t seed = 200;
  for (const auto& [m, n, k] : std::vector<std::tuple<int64_t, int64_t, int64_t>>{
           {128, 300, 128}, {37, 29, 17}, {5, 41, 1}, {16, 1000, 64}, {33, 13, 2}, {128, 2163, 9}}) {
    CAPTURE(m);
    CAPTURE(n);
    CAPTURE(k);
    const std::vector<float> a = operand(static_cast<size_t>(m * k), seed++, true);
    const std::vector<float> b = operand(static_cast<size_t>(n * k), seed++, true);  // entry (j, p) at b[j + p * n]
    std::vector<uint16_t> rounded(b.size());
    for (size_t i = 0; i < b.size(); ++i) rounded[i] = simd::bf16_round(b[i]);
    for (const bool emulated : {false, true}) {
      for (const int threads : {1, 2}) {
        CAPTURE(emulated);
        CAPTURE(threads);
        std::vector<float> want(static_cast<size_t>(m * n)), got(want.size(), 7.0f);
        simd::product_bf16(m, n, k, Operand{a.data(), 1, m}, Operand{b.data(), 1, n}, false, want.data(), m, threads,
                           emulated);
        simd::product_bf16(m, n, k, Operand{a.data(), 1, m}, simd::RoundedRows{rounded.data(), n}, false, got.data(), m,
                           threads, emulated);
        int64_t wrong = 0;
        for (size_t i = 0; i < want.size(); ++i) wrong += !same(got[i], want[i]);
        CHECK(wrong == 0);
      }
    }
  }
}
