// The attention softmax kernels of common/engine/simd (masked_softmax, softmax_backward) on every
// level this CPU runs: against a double reference, masked keys at exactly 0, the sums' fixed lanes
// (trailing masked keys change no bit; every level with FMA gives the same bits; a span from a
// multiple of 16 gives the whole row's bits), and the exponential's range ends.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "common/base/rng.h"
#include "common/engine/simd/kernels.h"
#include "tests/common/engine/simd_test_support.h"

using namespace pstrain;
using simd::KernelTable;
using pstrain::testing::runnable_levels;

namespace {

std::vector<float> uniform(size_t n, uint64_t seed, float lo, float hi) {
  Rng rng(seed);
  std::vector<float> v(n);
  for (float& x : v) x = rng.uniform_float(lo, hi);
  return v;
}

// Keys allowed with probability 3/4 (seeded), none when `none`.
std::vector<float> mask(size_t n, uint64_t seed, bool none = false) {
  Rng rng(seed);
  std::vector<float> m(n);
  for (float& x : m) x = !none && rng.uniform_float(0.0f, 1.0f) < 0.75f ? 1.0f : 0.0f;
  return m;
}

bool same(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

}  // namespace

TEST_CASE("masked_softmax: the softmax of the allowed keys, 0 elsewhere, on every level") {
  const float scale = 0.25f;
  for (const KernelTable* k : runnable_levels()) {
    CAPTURE(std::string(simd::target_name(k->target)));
    for (int64_t n : {1, 5, 15, 16, 17, 33, 200}) {
      CAPTURE(n);
      const auto scores = uniform(static_cast<size_t>(n), 10 + static_cast<uint64_t>(n), -40.0f, 40.0f);
      const auto allowed = mask(static_cast<size_t>(n), 20 + static_cast<uint64_t>(n));
      auto s = scores;
      k->masked_softmax(n, scale, allowed.data(), s.data());
      double top = -INFINITY, sum = 0.0;
      for (int64_t j = 0; j < n; ++j) {
        if (allowed[j] != 0.0f) top = std::max(top, double{scores[j]} * scale);
      }
      for (int64_t j = 0; j < n; ++j) {
        if (allowed[j] != 0.0f) sum += std::exp(double{scores[j]} * scale - top);
      }
      for (int64_t j = 0; j < n; ++j) {
        if (allowed[j] == 0.0f) {
          CHECK(s[j] == 0.0f);
        } else {
          const double want = std::exp(double{scores[j]} * scale - top) / sum;
          CHECK(std::abs(s[j] - want) <= 3e-6 * want + 1e-30);  // t - top rounds: |t| 6e-8 off
        }
      }
      // Trailing masked keys add +0 to their lanes: the allowed ones keep every bit.
      auto longer = scores, longer_mask = allowed;
      longer.resize(static_cast<size_t>(n + 23), 5.0f);
      longer_mask.resize(longer.size(), 0.0f);
      k->masked_softmax(n + 23, scale, longer_mask.data(), longer.data());
      longer.resize(static_cast<size_t>(n));
      CHECK(same(longer, s));
    }
    std::vector<float> none = uniform(40, 3, -1.0f, 1.0f);  // nothing allowed: all zero
    k->masked_softmax(40, scale, mask(40, 4, true).data(), none.data());
    CHECK(same(none, std::vector<float>(40, 0.0f)));
    // The exponential over its range: two keys {0, y} weigh 1 / (1 + e^y) and e^y / (1 + e^y).
    int worst_ulps = 0;
    for (float y = -87.0f; y <= 0.0f; y += 0.37f) {
      std::vector<float> pair{0.0f, y}, both_allowed(2, 1.0f);
      k->masked_softmax(2, 1.0f, both_allowed.data(), pair.data());
      const double e = std::exp(double{y}), want = e / (1 + e);
      const double ulp = std::ldexp(1.0, std::ilogb(want) - 23);
      worst_ulps = std::max(worst_ulps, static_cast<int>(std::abs(pair[1] - want) / ulp));
    }
    CHECK(worst_ulps <= 4);  // exp's ~2 units, then a division
    // A key 100 below the top underflows to exactly 0; the top itself weighs 1.
    std::vector<float> far{0.0f, -400.0f}, both(2, 1.0f);
    k->masked_softmax(2, scale, both.data(), far.data());
    CHECK(far[0] == 1.0f);
    CHECK(far[1] == 0.0f);
  }
}

TEST_CASE("softmax_backward: w (g - w.g) scale, on every level") {
  const float scale = 0.5f;
  for (const KernelTable* k : runnable_levels()) {
    CAPTURE(std::string(simd::target_name(k->target)));
    for (int64_t n : {1, 16, 37, 200}) {
      const auto w = uniform(static_cast<size_t>(n), 30 + static_cast<uint64_t>(n), 0.0f, 1.0f);
      const auto g = uniform(static_cast<size_t>(n), 40 + static_cast<uint64_t>(n), -1.0f, 1.0f);
      auto out = g;
      k->softmax_backward(n, scale, w.data(), out.data());
      double dot = 0.0;
      for (int64_t j = 0; j < n; ++j) dot += double{w[j]} * g[j];
      for (int64_t j = 0; j < n; ++j) {
        const double want = w[j] * (g[j] - dot) * scale;
        CHECK(std::abs(out[j] - want) <= 1e-5 * (std::abs(dot) + 1.0));
      }
    }
  }
}

TEST_CASE("masked_softmax and softmax_backward: the same bits on every level with FMA") {
  const int64_t n = 203;
  const auto scores = uniform(n, 50, -30.0f, 30.0f), allowed = mask(n, 51), g = uniform(n, 52, -1.0f, 1.0f);
  std::vector<float> first_s, first_g;
  int fma_levels = 0;
  for (const KernelTable* k : runnable_levels()) {
    if (!k->fma) continue;
    ++fma_levels;
    auto s = scores, d = g;
    k->masked_softmax(n, 0.125f, allowed.data(), s.data());
    k->softmax_backward(n, 0.125f, s.data(), d.data());
    if (first_s.empty()) {
      first_s = s;
      first_g = d;
    } else {
      CAPTURE(std::string(simd::target_name(k->target)));
      CHECK(same(s, first_s));
      CHECK(same(d, first_g));
    }
  }
  MESSAGE("levels with FMA here: " << fma_levels);
}

TEST_CASE("masked_softmax and softmax_backward over a span from a multiple of 16: the bits of the whole row") {
  // multi_head_attention runs each example over its span (attention.h): keys outside it are not
  // allowed, and a span starting at a multiple of 16 keeps every key in its lane, so the kernels
  // on the span give the whole row's bits. A start off the lanes (5) may not; it differs here.
  const int64_t n = 203;
  const auto scores = uniform(n, 60, -30.0f, 30.0f), g = uniform(n, 61, -1.0f, 1.0f), allowed_all = mask(n, 62);
  int off_lane_differences = 0;
  for (const KernelTable* k : runnable_levels()) {
    CAPTURE(std::string(simd::target_name(k->target)));
    for (const int64_t lo : {0, 5, 16, 32, 48}) {
      for (const int64_t hi : {lo + 1, int64_t{150}, n}) {
        CAPTURE(lo);
        CAPTURE(hi);
        auto allowed = allowed_all;
        for (int64_t j = 0; j < n; ++j) {
          if (j < lo + 3 || j >= hi) allowed[static_cast<size_t>(j)] = 0.0f;
        }
        allowed[static_cast<size_t>(hi - 1)] = 1.0f;  // one allowed key at least
        auto whole = scores, whole_g = g;
        k->masked_softmax(n, 0.25f, allowed.data(), whole.data());
        k->softmax_backward(n, 0.25f, whole.data(), whole_g.data());
        auto span = scores, span_g = g;
        k->masked_softmax(hi - lo, 0.25f, allowed.data() + lo, span.data() + lo);
        k->softmax_backward(hi - lo, 0.25f, span.data() + lo, span_g.data() + lo);
        const std::vector<float> a(whole.begin() + lo, whole.begin() + hi), b(span.begin() + lo, span.begin() + hi);
        const std::vector<float> da(whole_g.begin() + lo, whole_g.begin() + hi);
        const std::vector<float> db(span_g.begin() + lo, span_g.begin() + hi);
        if (lo % 16 == 0) {
          CHECK(same(a, b));
          CHECK(same(da, db));
        } else if (!same(a, b) || !same(da, db)) {
          ++off_lane_differences;
        }
      }
    }
  }
  CHECK(off_lane_differences > 0);
}
