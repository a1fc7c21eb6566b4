// The dispatched kernels of common/engine/simd on every level this CPU runs: each against a scalar
// reference (1e-5 relative), each element's value independent of the range or tile it falls in,
// and the product bit for bit the sequential chain of multiply-adds that its contract names (so
// every level with FMA gives the same bits), for operands laid out every way the engine uses.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "common/base/rng.h"
#include "common/engine/simd/kernels.h"
#include "tests/common/engine/simd_test_support.h"

using namespace pstrain;
using simd::CpuTarget;
using simd::KernelTable;
using pstrain::testing::runnable_levels;

namespace {

std::vector<float> random_floats(size_t n, uint64_t seed, float lo = -1.0f, float hi = 1.0f) {
  Rng rng(seed);
  std::vector<float> v(n);
  for (float& x : v) x = rng.uniform_float(lo, hi);
  return v;
}

bool same_bits(float a, float b) { return std::memcmp(&a, &b, sizeof a) == 0; }

// An operand (entry (i, p) at data[i * row + p * step]) stored column-major (row 1) or row-major
// (step 1), with a leading dimension above its size.
struct Layout {
  bool row_major;
  int64_t rows, k, ld;
  int64_t row() const { return row_major ? ld : 1; }
  int64_t step() const { return row_major ? 1 : ld; }
  size_t size() const { return static_cast<size_t>(ld * (row_major ? rows : std::max<int64_t>(k, 1)) + 1); }
};

// C = [C +] A B^T computed by `table` (with fresh scratch); C's entries start at `start`.
std::vector<float> product(const KernelTable& table, int64_t m, int64_t n, int64_t k, const float* a, const Layout& la,
                           const float* b, const Layout& lb, int64_t ldc, bool accumulate, const std::vector<float>& start) {
  std::vector<float> c = start;
  std::vector<float> scratch(table.product_scratch(m, n, k) + 16);
  table.product(m, n, k, a, la.row(), la.step(), b, lb.row(), lb.step(), accumulate, c.data(), ldc, scratch.data());
  return c;
}

// The contract's chain for one element: from `from`, one multiply-add per k in order.
float chain(bool fma, float from, int64_t k, const float* a, int64_t a_step, const float* b, int64_t b_step) {
  float c = from;
  for (int64_t p = 0; p < k; ++p) {
    if (fma) {
      c = std::fma(a[p * a_step], b[p * b_step], c);
    } else {
      volatile float product = a[p * a_step] * b[p * b_step];  // rounded, not fused
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

TEST_CASE("product: the sequential chain of its contract, bit for bit, on every level, shape and layout") {
  // Shapes around every level's tile (rows 8..32, columns 4..12), k from 0 up; both operands
  // column- or row-major (the dense layer's forward reads its input row-major, its input gradient
  // the kernel), with leading dimensions above their sizes; C overwritten or accumulated into.
  const int64_t shapes[][3] = {{1, 1, 1},  {3, 5, 7},   {16, 12, 64}, {17, 13, 3},  {33, 25, 64},
                               {40, 7, 129}, {700, 30, 64}, {5, 100, 1}, {64, 48, 0}, {31, 1, 250}};
  std::map<std::string, std::vector<float>> fma_results;  // by case, from the first level with FMA
  for (const KernelTable* table : runnable_levels()) {
    CAPTURE(simd::target_name(table->target));
    size_t shape_index = 0;
    for (const auto& s : shapes) {
      const int64_t m = s[0], n = s[1], k = s[2], ldc = m + 2;
      ++shape_index;
      for (const bool a_rows : {false, true}) {
        for (const bool b_rows : {false, true}) {
          for (const bool accumulate : {false, true}) {
            CAPTURE(m);
            CAPTURE(n);
            CAPTURE(k);
            CAPTURE(a_rows);
            CAPTURE(b_rows);
            CAPTURE(accumulate);
            const Layout la{a_rows, m, k, a_rows ? k + 3 : m + 3}, lb{b_rows, n, k, b_rows ? k + 1 : n + 1};
            const auto a = random_floats(la.size(), 1 + shape_index);
            const auto b = random_floats(lb.size(), 100 + shape_index);
            const auto start = random_floats(static_cast<size_t>(ldc * n), 200 + shape_index);
            const auto c = product(*table, m, n, k, a.data(), la, b.data(), lb, ldc, accumulate, start);
            int wrong = 0, far = 0, touched = 0;
            for (int64_t j = 0; j < n; ++j) {
              for (int64_t i = 0; i < m; ++i) {
                const float got = c[static_cast<size_t>(j * ldc + i)];
                const float from = accumulate ? start[static_cast<size_t>(j * ldc + i)] : 0.0f;
                wrong += !same_bits(got, chain(table->fma, from, k, a.data() + i * la.row(), la.step(),
                                               b.data() + j * lb.row(), lb.step()));
                double exact = from, scale = std::abs(from);
                for (int64_t p = 0; p < k; ++p) {
                  const double t = double{a[static_cast<size_t>(i * la.row() + p * la.step())]} *
                                   b[static_cast<size_t>(j * lb.row() + p * lb.step())];
                  exact += t;
                  scale += std::abs(t);
                }
                far += std::abs(got - exact) > 1e-5 * std::max(scale, 1e-30);
              }
              // Rows past m in C's leading dimension are left alone.
              for (int64_t i = m; i < ldc; ++i) touched += c[static_cast<size_t>(j * ldc + i)] != start[static_cast<size_t>(j * ldc + i)];
            }
            CHECK(wrong == 0);
            CHECK(far == 0);
            CHECK(touched == 0);
            if (table->fma) {
              const std::string key = std::to_string(shape_index) + (a_rows ? "r" : "c") + (b_rows ? "r" : "c") + (accumulate ? "+" : "=");
              if (fma_results[key].empty()) {
                fma_results[key] = c;
              } else {
                CHECK(std::memcmp(c.data(), fma_results[key].data(), c.size() * sizeof(float)) == 0);
              }
            }
          }
        }
      }
    }
  }
}

TEST_CASE("product: an element's value does not depend on the block it is computed in, nor on the threads") {
  // The rows and columns of a server's part of a kernel (a sub-block, at any offset) equal those
  // rows and columns of the whole product, and so do the columns of a batch's examples.
  const int64_t m = 75, n = 41, k = 96;
  const auto a = random_floats(static_cast<size_t>(m * k), 7);
  const auto b = random_floats(static_cast<size_t>(n * k), 8);
  const Layout la{false, m, k, m}, lb{false, n, k, n};
  const std::vector<float> zeros(static_cast<size_t>(m * n));
  for (const KernelTable* table : runnable_levels()) {
    CAPTURE(simd::target_name(table->target));
    const auto whole = product(*table, m, n, k, a.data(), la, b.data(), lb, m, false, zeros);
    for (const auto& [i0, j0, mm, nn] : {std::tuple{1, 3, 70, 29}, {17, 0, 9, 41}, {0, 40, 75, 1}, {33, 5, 42, 13}}) {
      const Layout pa{false, mm, k, m}, pb{false, nn, k, n};
      const auto part = product(*table, mm, nn, k, a.data() + i0, pa, b.data() + j0, pb, mm, false,
                                std::vector<float>(static_cast<size_t>(mm * nn)));
      int differ = 0;
      for (int64_t j = 0; j < nn; ++j) {
        for (int64_t i = 0; i < mm; ++i) {
          differ += !same_bits(part[static_cast<size_t>(j * mm + i)], whole[static_cast<size_t>((j0 + j) * m + i0 + i)]);
        }
      }
      CHECK(differ == 0);
    }
  }
  // The dispatching wrapper, split over threads.
  std::vector<float> one(static_cast<size_t>(m * n)), two(static_cast<size_t>(m * n));
  simd::product(m, n, k, {a.data(), 1, m}, {b.data(), 1, n}, false, one.data(), m, 1);
  simd::product(m, n, k, {a.data(), 1, m}, {b.data(), 1, n}, false, two.data(), m, 2);
  CHECK(one == two);
  CHECK(std::memcmp(one.data(), product(simd::kernels(), m, n, k, a.data(), la, b.data(), lb, m, false, zeros).data(),
                    one.size() * sizeof(float)) == 0);
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
    SUBCASE("relu_mask, relu, relu_select, add_relu and row_sums") {
      const int64_t rows = 37, cols = 19;
      const auto y = random_floats(static_cast<size_t>(rows * cols), 5);
      auto d = random_floats(static_cast<size_t>(rows * cols), 6);
      const auto before = d;
      k.relu_mask(rows * cols, y.data(), d.data());
      for (size_t i = 0; i < d.size(); ++i) CHECK(d[i] == (y[i] > 0 ? before[i] : 0.0f));
      std::vector<float> r(d.size()), sel(d.size()), sum(d.size());
      auto with_nan = y;  // NaN and -0 give 0, as the ReLU layer's `x > 0 ? x : 0`
      with_nan[3] = std::nanf("");
      with_nan[4] = -0.0f;
      k.relu(rows * cols, with_nan.data(), r.data());
      CHECK(same_bits(r[3], 0.0f));
      CHECK(same_bits(r[4], 0.0f));
      k.relu(rows * cols, y.data(), r.data());
      k.relu_select(rows * cols, y.data(), before.data(), sel.data());
      k.add_relu(rows * cols, y.data(), before.data(), sum.data());
      for (size_t i = 0; i < d.size(); ++i) {
        CHECK(r[i] == (y[i] > 0 ? y[i] : 0.0f));
        CHECK(sel[i] == d[i]);
        const float v = y[i] + before[i];
        CHECK(same_bits(sum[i], v > 0 ? v : 0.0f));
      }
      auto in_place = before;  // relu_select with d = g
      k.relu_select(rows * cols, y.data(), in_place.data(), in_place.data());
      CHECK(in_place == d);
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

TEST_CASE("max_pool: the largest value of each window and its offset, the first on ties, on every level") {
  // Values drawn from a few levels, so that windows tie often (zeros after a ReLU do).
  struct Shape {
    int64_t h, w, c, pool_h, pool_w, stride_h, stride_w;
  };
  for (const Shape& s : {Shape{8, 8, 32, 2, 2, 2, 2}, Shape{7, 9, 3, 2, 2, 2, 2}, Shape{9, 9, 5, 3, 3, 2, 2},
                         Shape{6, 10, 17, 3, 2, 1, 3}}) {
    const int64_t oh = (s.h - s.pool_h) / s.stride_h + 1, ow = (s.w - s.pool_w) / s.stride_w + 1;
    std::vector<float> image(static_cast<size_t>(s.h * s.w * s.c));
    Rng rng(static_cast<uint64_t>(s.c));
    for (float& v : image) v = static_cast<float>(rng.uniform_index(4)) - 1.0f;  // -1, 0, 1, 2
    std::vector<float> want(static_cast<size_t>(oh * ow * s.c));
    std::vector<int32_t> want_at(want.size());
    for (int64_t y = 0; y < oh; ++y) {
      for (int64_t x = 0; x < ow; ++x) {
        for (int64_t ch = 0; ch < s.c; ++ch) {
          int64_t best = (y * s.stride_h * s.w + x * s.stride_w) * s.c + ch;
          for (int64_t ky = 0; ky < s.pool_h; ++ky) {
            for (int64_t kx = 0; kx < s.pool_w; ++kx) {
              const int64_t at = ((y * s.stride_h + ky) * s.w + x * s.stride_w + kx) * s.c + ch;
              if (image[static_cast<size_t>(at)] > image[static_cast<size_t>(best)]) best = at;
            }
          }
          want[static_cast<size_t>((y * ow + x) * s.c + ch)] = image[static_cast<size_t>(best)];
          want_at[static_cast<size_t>((y * ow + x) * s.c + ch)] = static_cast<int32_t>(best);
        }
      }
    }
    for (const KernelTable* table : runnable_levels()) {
      CAPTURE(simd::target_name(table->target));
      CAPTURE(s.c);
      std::vector<float> out(want.size());
      std::vector<int32_t> at(want.size());
      table->max_pool(image.data(), s.w, s.c, s.pool_h, s.pool_w, s.stride_h, s.stride_w, oh, ow, out.data(), at.data());
      CHECK(out == want);
      CHECK(at == want_at);
    }
  }
}

TEST_CASE("batch normalization's passes: double references, sums in row order, rows split freely, on every level") {
  const int64_t rows = 53;
  for (const int64_t c : {1, 3, 16, 37, 64}) {
    const auto n = static_cast<size_t>(rows * c), cs = static_cast<size_t>(c);
    const auto x = random_floats(n, 11, -2.0f, 3.0f);
    const auto dy = random_floats(n, 12);
    const auto mean = random_floats(cs, 13), gamma = random_floats(cs, 14, 0.5f, 1.5f), beta = random_floats(cs, 15);
    const auto rstd = random_floats(cs, 16, 0.5f, 2.0f);
    const auto mdx = random_floats(cs, 17, -0.1f, 0.1f), mdxx = random_floats(cs, 18, -0.1f, 0.1f);
    for (const KernelTable* table : runnable_levels()) {
      CAPTURE(simd::target_name(table->target));
      CAPTURE(c);
      const KernelTable& k = *table;
      // Sums: plain adds in row order, so the bits of the sequential float sum.
      std::vector<float> sums(cs, 0.5f), squares(cs, 0.0f);
      k.channel_sums(rows, c, x.data(), sums.data());
      k.channel_square_sums(rows, c, x.data(), mean.data(), squares.data());
      for (int64_t ch = 0; ch < c; ++ch) {
        float want = 0.5f;
        double want_squares = 0;
        for (int64_t r = 0; r < rows; ++r) {
          want += x[static_cast<size_t>(r * c + ch)];
          const double d = double{x[static_cast<size_t>(r * c + ch)]} - mean[static_cast<size_t>(ch)];
          want_squares += d * d;
        }
        CHECK(same_bits(sums[static_cast<size_t>(ch)], want));
        CHECK(rel(squares[static_cast<size_t>(ch)], want_squares) < 1e-5);
      }
      for (const bool relu : {false, true}) {
        CAPTURE(relu);
        std::vector<float> y(n), pieces(n);
        k.normalize(rows, c, x.data(), mean.data(), rstd.data(), gamma.data(), beta.data(), relu, y.data());
        for (int64_t first = 0; first < rows; first += 7) {  // rows split: the same bits
          const int64_t count = std::min<int64_t>(7, rows - first);
          k.normalize(count, c, x.data() + first * c, mean.data(), rstd.data(), gamma.data(), beta.data(), relu,
                      pieces.data() + first * c);
        }
        CHECK(std::memcmp(y.data(), pieces.data(), n * sizeof(float)) == 0);
        for (size_t i = 0; i < n; ++i) {
          const size_t ch = i % cs;
          const double v = (double{x[i]} - mean[ch]) * rstd[ch] * gamma[ch] + beta[ch];
          if (relu && v <= 0) {
            CHECK(y[i] == 0.0f);
            continue;
          }
          CHECK(rel(y[i], relu ? std::max(v, 1e-30) : v, 1.0) < 1e-5);
        }
        // Backward, with the ReLU's mask taken from y when fused.
        const float* mask = relu ? y.data() : nullptr;
        std::vector<float> dgamma(cs, 0.0f), dbeta(cs, 0.0f), s1(cs, 0.0f), s2(cs, 0.0f), dx(n), dx_pieces(n);
        k.normalize_backward_sums(rows, c, x.data(), dy.data(), mask, mean.data(), rstd.data(), gamma.data(),
                                  dgamma.data(), dbeta.data(), s1.data(), s2.data());
        k.normalize_backward(rows, c, x.data(), dy.data(), mask, mean.data(), rstd.data(), gamma.data(), mdx.data(),
                             mdxx.data(), dx.data());
        for (int64_t first = 0; first < rows; first += 5) {
          const int64_t count = std::min<int64_t>(5, rows - first);
          k.normalize_backward(count, c, x.data() + first * c, dy.data() + first * c,
                               mask != nullptr ? mask + first * c : nullptr, mean.data(), rstd.data(), gamma.data(),
                               mdx.data(), mdxx.data(), dx_pieces.data() + first * c);
        }
        CHECK(std::memcmp(dx.data(), dx_pieces.data(), n * sizeof(float)) == 0);
        std::vector<double> want_dgamma(cs), want_dbeta(cs), want_s1(cs), want_s2(cs), scale(cs);
        for (size_t i = 0; i < n; ++i) {
          const size_t ch = i % cs;
          const double g = relu && !(y[i] > 0.0f) ? 0.0 : double{dy[i]};
          const double xhat = (double{x[i]} - mean[ch]) * rstd[ch], dxhat = g * gamma[ch];
          want_dgamma[ch] += g * xhat;
          want_dbeta[ch] += g;
          want_s1[ch] += dxhat;
          want_s2[ch] += dxhat * xhat;
          scale[ch] += std::abs(dxhat * xhat) + std::abs(dxhat);
          const double want_dx = rstd[ch] * (dxhat - mdx[ch] - xhat * mdxx[ch]);
          CHECK(rel(dx[i], want_dx, rstd[ch] * (std::abs(dxhat) + std::abs(mdx[ch]) + std::abs(xhat * mdxx[ch]))) < 1e-5);
        }
        for (size_t ch = 0; ch < cs; ++ch) {
          CHECK(rel(dgamma[ch], want_dgamma[ch], scale[ch]) < 1e-5);
          CHECK(rel(dbeta[ch], want_dbeta[ch], scale[ch]) < 1e-5);
          CHECK(rel(s1[ch], want_s1[ch], scale[ch]) < 1e-5);
          CHECK(rel(s2[ch], want_s2[ch], scale[ch]) < 1e-5);
        }
      }
    }
  }
}
