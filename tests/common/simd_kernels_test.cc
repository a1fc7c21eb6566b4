// The dispatched kernels of common/simd on every level this CPU runs: each against a scalar
// reference (1e-5 relative), each element's value independent of the range or tile it falls in,
// and the outer product bit for bit the sequential chain of multiply-adds that its contract names
// (so every level with FMA gives the same bits).
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <tuple>
#include <vector>

#include "common/rng.h"
#include "common/simd/kernels.h"

using namespace pstrain;
using simd::CpuTarget;
using simd::KernelTable;

namespace {

std::vector<const KernelTable*> runnable_levels() {
  std::vector<const KernelTable*> out;
  for (CpuTarget t : {CpuTarget::kGeneric, CpuTarget::kX86_64, CpuTarget::kX86_64_V3, CpuTarget::kX86_64_V4}) {
    if (const KernelTable* k = simd::kernels_for(t)) out.push_back(k);
  }
  return out;
}

std::vector<float> random_floats(size_t n, uint64_t seed, float lo = -1.0f, float hi = 1.0f) {
  Rng rng(seed);
  std::vector<float> v(n);
  for (float& x : v) x = rng.uniform_float(lo, hi);
  return v;
}

bool same_bits(float a, float b) { return std::memcmp(&a, &b, sizeof a) == 0; }

// C = A B^T computed by `table` (with fresh scratch).
std::vector<float> outer(const KernelTable& table, int64_t m, int64_t n, int64_t k, const float* a, int64_t lda,
                         const float* b, int64_t ldb, int64_t ldc) {
  std::vector<float> c(static_cast<size_t>(ldc * n), 1234.5f);
  std::vector<float> scratch(table.outer_product_scratch(m, n, k) + 16);
  table.outer_product(m, n, k, a, lda, b, ldb, c.data(), ldc, scratch.data());
  return c;
}

// The contract's chain for one element: from +0, one multiply-add per k in order.
float chain(bool fma, int64_t k, const float* a, int64_t lda, const float* b, int64_t ldb) {
  float c = 0.0f;
  for (int64_t p = 0; p < k; ++p) {
    if (fma) {
      c = std::fma(a[p * lda], b[p * ldb], c);
    } else {
      volatile float product = a[p * lda] * b[p * ldb];  // rounded, not fused
      c = c + product;
    }
  }
  return c;
}

}  // namespace

TEST_CASE("the active level is one this CPU runs, and its table is the one kernels_for gives") {
  const CpuTarget active = simd::active_target();
  MESSAGE("CPU: " << simd::describe_cpu());
  CHECK(simd::cpu_runs(active));
  CHECK(&simd::kernels() == simd::kernels_for(active));
  CHECK(simd::kernels().target == active);
  CHECK(runnable_levels().size() >= 1);
  CHECK(simd::parse_target("x86-64-v3") == CpuTarget::kX86_64_V3);
  CHECK(!simd::parse_target("avx2").has_value());
}

TEST_CASE("outer_product: the sequential chain of its contract, bit for bit, on every level and shape") {
  // Shapes around every level's tile (rows 8..32, columns 4..12), leading dimensions above the
  // rows, k from 0 up.
  const int64_t shapes[][3] = {{1, 1, 1},  {3, 5, 7},   {16, 12, 64}, {17, 13, 3},  {33, 25, 64},
                               {40, 7, 129}, {700, 30, 64}, {5, 100, 1}, {64, 48, 0}, {31, 1, 250}};
  std::vector<std::vector<float>> fma_results;  // per shape, from the first level with FMA
  for (const KernelTable* table : runnable_levels()) {
    CAPTURE(simd::target_name(table->target));
    size_t shape_index = 0;
    for (const auto& s : shapes) {
      const int64_t m = s[0], n = s[1], k = s[2], lda = m + 3, ldb = n + 1, ldc = m + 2;
      CAPTURE(m);
      CAPTURE(n);
      CAPTURE(k);
      const auto a = random_floats(static_cast<size_t>(lda * std::max<int64_t>(k, 1)), 1 + shape_index);
      const auto b = random_floats(static_cast<size_t>(ldb * std::max<int64_t>(k, 1)), 100 + shape_index);
      const auto c = outer(*table, m, n, k, a.data(), lda, b.data(), ldb, ldc);
      int wrong = 0, far = 0;
      for (int64_t j = 0; j < n; ++j) {
        for (int64_t i = 0; i < m; ++i) {
          const float got = c[static_cast<size_t>(j * ldc + i)];
          wrong += !same_bits(got, chain(table->fma, k, a.data() + i, lda, b.data() + j, ldb));
          double exact = 0, scale = 0;
          for (int64_t p = 0; p < k; ++p) {
            exact += double{a[static_cast<size_t>(p * lda + i)]} * b[static_cast<size_t>(p * ldb + j)];
            scale += std::abs(double{a[static_cast<size_t>(p * lda + i)]} * b[static_cast<size_t>(p * ldb + j)]);
          }
          far += std::abs(got - exact) > 1e-5 * std::max(scale, 1e-30);
        }
        // Rows past m in C's leading dimension are left alone.
        for (int64_t i = m; i < ldc; ++i) CHECK(c[static_cast<size_t>(j * ldc + i)] == 1234.5f);
      }
      CHECK(wrong == 0);
      CHECK(far == 0);
      if (table->fma) {
        if (fma_results.size() <= shape_index) fma_results.resize(shape_index + 1);
        if (fma_results[shape_index].empty()) {
          fma_results[shape_index] = c;
        } else {
          CHECK(std::memcmp(c.data(), fma_results[shape_index].data(), c.size() * sizeof(float)) == 0);
        }
      }
      ++shape_index;
    }
  }
}

TEST_CASE("outer_product: an element's value does not depend on the block it is computed in") {
  // The rows and columns of a server's part of a kernel (a sub-block, at any offset) equal those
  // rows and columns of the whole product.
  const int64_t m = 75, n = 41, k = 96;
  const auto a = random_floats(static_cast<size_t>(m * k), 7);
  const auto b = random_floats(static_cast<size_t>(n * k), 8);
  for (const KernelTable* table : runnable_levels()) {
    CAPTURE(simd::target_name(table->target));
    const auto whole = outer(*table, m, n, k, a.data(), m, b.data(), n, m);
    for (const auto& [i0, j0, mm, nn] : {std::tuple{1, 3, 70, 29}, {17, 0, 9, 41}, {0, 40, 75, 1}, {33, 5, 42, 13}}) {
      const auto part = outer(*table, mm, nn, k, a.data() + i0, m, b.data() + j0, n, mm);
      int differ = 0;
      for (int64_t j = 0; j < nn; ++j) {
        for (int64_t i = 0; i < mm; ++i) {
          differ += !same_bits(part[static_cast<size_t>(j * mm + i)], whole[static_cast<size_t>((j0 + j) * m + i0 + i)]);
        }
      }
      CHECK(differ == 0);
    }
  }
}

namespace {

// Runs an element-wise kernel over [0, n) once, then in pieces at odd offsets, on copies of the
// same state, and checks that the pieces give the same bits; returns the whole run's outputs.
struct State {
  std::vector<float> w, g, s1, s2, out;
};

State make_state(size_t n, uint64_t seed) {
  State s{random_floats(n, seed), random_floats(n, seed + 1, -0.5f, 0.5f), random_floats(n, seed + 2, -0.1f, 0.1f),
          random_floats(n, seed + 3, 0.0f, 0.01f), std::vector<float>(n)};
  return s;
}

template <typename Run>
void check_split_invariance(size_t n, const Run& run) {
  State whole = make_state(n, 42), pieces = whole;
  run(whole, 0, static_cast<int64_t>(n));
  for (size_t begin = 0; begin < n;) {
    const size_t end = std::min(n, begin + 1 + (begin * 7 + 5) % 37);
    run(pieces, static_cast<int64_t>(begin), static_cast<int64_t>(end));
    begin = end;
  }
  CHECK(std::memcmp(whole.out.data(), pieces.out.data(), n * sizeof(float)) == 0);
  CHECK(std::memcmp(whole.s1.data(), pieces.s1.data(), n * sizeof(float)) == 0);
  CHECK(std::memcmp(whole.s2.data(), pieces.s2.data(), n * sizeof(float)) == 0);
}

// Relative to the larger of the result and `scale` (the terms' size: a sum near zero of terms near
// one is only that exact).
double rel(double got, double want, double scale = 0) {
  return std::abs(got - want) / std::max({1e-6, std::abs(want), scale});
}

}  // namespace

TEST_CASE("element-wise kernels: scalar reference, split invariance, in place") {
  const size_t n = 1003;
  for (const KernelTable* table : runnable_levels()) {
    CAPTURE(simd::target_name(table->target));
    const KernelTable& k = *table;
    const float lr = 0.01f, mom = 0.9f, alpha = 0.003f, b1 = 0.1f, b2 = 0.001f, eps = 1e-7f;

    SUBCASE("sgd") {
      check_split_invariance(n, [&](State& s, int64_t b, int64_t e) { k.sgd(e - b, &s.w[b], &s.g[b], &s.out[b], lr); });
      State s = make_state(n, 1);
      k.sgd(n, s.w.data(), s.g.data(), s.out.data(), lr);
      for (size_t i = 0; i < n; ++i) CHECK(rel(s.out[i], double{s.w[i]} - double{lr} * s.g[i], std::abs(s.w[i])) < 1e-5);
      State in_place = make_state(n, 1);
      k.sgd(n, in_place.w.data(), in_place.g.data(), in_place.w.data(), lr);
      CHECK(std::memcmp(in_place.w.data(), s.out.data(), n * sizeof(float)) == 0);
    }
    SUBCASE("momentum and nesterov") {
      for (bool nesterov : {false, true}) {
        check_split_invariance(n, [&](State& s, int64_t b, int64_t e) {
          k.momentum(e - b, &s.w[b], &s.g[b], &s.s1[b], &s.out[b], lr, mom, nesterov);
        });
        State s = make_state(n, 2);
        const State before = s;
        k.momentum(n, s.w.data(), s.g.data(), s.s1.data(), s.out.data(), lr, mom, nesterov);
        for (size_t i = 0; i < n; ++i) {
          const double m = double{mom} * before.s1[i] - double{lr} * before.g[i];
          CHECK(rel(s.s1[i], m, std::abs(before.s1[i])) < 1e-5);
          const double want = before.w[i] + (nesterov ? double{mom} * m - double{lr} * before.g[i] : m);
          CHECK(rel(s.out[i], want, std::abs(before.w[i]) + std::abs(m)) < 1e-5);
        }
      }
    }
    SUBCASE("adam") {
      check_split_invariance(n, [&](State& s, int64_t b, int64_t e) {
        k.adam(e - b, &s.w[b], &s.g[b], &s.s1[b], &s.s2[b], &s.out[b], alpha, b1, b2, eps);
      });
      State s = make_state(n, 3);
      const State before = s;
      k.adam(n, s.w.data(), s.g.data(), s.s1.data(), s.s2.data(), s.out.data(), alpha, b1, b2, eps);
      for (size_t i = 0; i < n; ++i) {
        const double g = before.g[i];
        const double m = before.s1[i] + (g - before.s1[i]) * b1, v = before.s2[i] + (g * g - before.s2[i]) * b2;
        CHECK(rel(s.s1[i], m, std::abs(before.s1[i])) < 1e-5);
        CHECK(rel(s.s2[i], v, std::abs(before.s2[i])) < 1e-5);
        CHECK(rel(s.out[i], before.w[i] - double{alpha} * m / (std::sqrt(v) + eps), std::abs(before.w[i])) < 1e-5);
      }
    }
    SUBCASE("adagrad") {
      check_split_invariance(n, [&](State& s, int64_t b, int64_t e) {
        k.adagrad(e - b, &s.w[b], &s.g[b], &s.s2[b], &s.out[b], lr, eps);
      });
      State s = make_state(n, 4);
      const State before = s;
      k.adagrad(n, s.w.data(), s.g.data(), s.s2.data(), s.out.data(), lr, eps);
      for (size_t i = 0; i < n; ++i) {
        const double g = before.g[i], acc = before.s2[i] + g * g;
        CHECK(rel(s.s2[i], acc) < 1e-5);
        CHECK(rel(s.out[i], before.w[i] - double{lr} * g / (std::sqrt(acc) + eps), std::abs(before.w[i])) < 1e-5);
      }
    }
    SUBCASE("relu_mask and row_sums") {
      const int64_t rows = 37, cols = 19;
      const auto y = random_floats(static_cast<size_t>(rows * cols), 5);
      auto d = random_floats(static_cast<size_t>(rows * cols), 6);
      const auto before = d;
      k.relu_mask(rows * cols, y.data(), d.data());
      for (size_t i = 0; i < d.size(); ++i) CHECK(d[i] == (y[i] > 0 ? before[i] : 0.0f));
      std::vector<float> sums(static_cast<size_t>(rows));
      k.row_sums(rows, cols, d.data(), sums.data());
      for (int64_t r = 0; r < rows; ++r) {
        float want = 0.0f;  // in column order, from +0: the same bits
        for (int64_t c = 0; c < cols; ++c) want = want + d[static_cast<size_t>(c * rows + r)];
        CHECK(same_bits(sums[static_cast<size_t>(r)], want));
      }
    }
  }
}
