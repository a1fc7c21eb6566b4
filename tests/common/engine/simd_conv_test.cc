// The one-channel convolution's kernels (simd/kernels.h, one_channel_conv and its gradient) on
// every level this CPU runs, bit for bit against their contract written out as scalar chains: the
// forward's taps in (ky, kx) order from +0 then the bias, the gradient's positions in order from +0
// added onto what dw and db held, one multiply-add per term (fused where the level has FMA, so
// every level with FMA gives the same bits). The geometries cover filter counts below, at and past
// a vector's width at every level (the partial last block, and its whole loads up to the buffer's
// end), taps past one pass's group (5 x 5, 8 x 8), strides, and a ReLU mask over zeros, negative
// values and NaN. Buffers are exactly as large as the contract says, so that AddressSanitizer
// (CI's asan-core) sees a read past them.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "common/base/rng.h"
#include "common/engine/simd/kernels.h"
#include "tests/common/engine/simd_test_support.h"

using namespace pstrain;
using simd::KernelTable;
using simd::OneChannelGeometry;
using pstrain::testing::runnable_levels;

namespace {

struct Shape {
  int64_t oh, ow, kh, kw, sh, sw, filters;
};

std::string name(const Shape& s) {
  return std::to_string(s.oh) + "x" + std::to_string(s.ow) + " k" + std::to_string(s.kh) + "x" + std::to_string(s.kw) +
         " s" + std::to_string(s.sh) + "x" + std::to_string(s.sw) + " f" + std::to_string(s.filters);
}

float multiply_add(bool fma, float a, float b, float c) {
  if (fma) return std::fma(a, b, c);
  volatile float product = a * b;  // rounded, not fused
  return c + product;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

struct Case {
  OneChannelGeometry g;
  int64_t rows;
  std::vector<float> image, kernel, bias, y, dy, dw, db;  // dw and db: what the gradient adds onto
};

Case make_case(const Shape& s, uint64_t seed) {
  Case c;
  c.g = {(s.ow - 1) * s.sw + s.kw, s.kh, s.kw, s.sh, s.sw, s.oh, s.ow, s.filters};
  c.rows = (s.oh - 1) * s.sh + s.kh;
  Rng rng(seed);
  auto fill = [&](std::vector<float>& v, size_t n) {
    v.resize(n);
    for (float& x : v) x = rng.uniform_float(-1.0f, 1.0f);
  };
  fill(c.image, static_cast<size_t>(c.rows * c.g.pw));
  // The slack the contract asks for, holding values the sums must not take in.
  for (int64_t i = 0; i < simd::kOneChannelSlack * s.sw; ++i) c.image.push_back(1e30f);
  const auto outputs = static_cast<size_t>(s.oh * s.ow * s.filters);
  fill(c.kernel, static_cast<size_t>(s.kh * s.kw * s.filters));
  fill(c.bias, static_cast<size_t>(s.filters));
  fill(c.y, outputs);
  fill(c.dy, outputs);
  for (size_t i = 0; i < outputs; i += 7) c.y[i] = 0.0f;
  for (size_t i = 3; i < outputs; i += 11) c.y[i] = std::numeric_limits<float>::quiet_NaN();
  fill(c.dw, c.kernel.size());
  fill(c.db, c.bias.size());
  return c;
}

std::vector<float> forward_contract(const Case& c, bool fma, bool relu) {
  const OneChannelGeometry& g = c.g;
  std::vector<float> out(static_cast<size_t>(g.oh * g.ow * g.filters));
  for (int64_t y = 0; y < g.oh; ++y) {
    for (int64_t x = 0; x < g.ow; ++x) {
      for (int64_t f = 0; f < g.filters; ++f) {
        float sum = 0.0f;
        for (int64_t ky = 0; ky < g.kh; ++ky) {
          for (int64_t kx = 0; kx < g.kw; ++kx) {
            sum = multiply_add(fma, c.image[(y * g.sh + ky) * g.pw + x * g.sw + kx], c.kernel[(ky * g.kw + kx) * g.filters + f],
                               sum);
          }
        }
        const float v = sum + c.bias[f];
        out[(y * g.ow + x) * g.filters + f] = relu ? (v > 0.0f ? v : 0.0f) : v;
      }
    }
  }
  return out;
}

void gradient_contract(const Case& c, bool fma, bool masked, std::vector<float>& dw, std::vector<float>& db) {
  const OneChannelGeometry& g = c.g;
  dw = c.dw;
  db = c.db;
  for (int64_t f = 0; f < g.filters; ++f) {
    float bias = 0.0f;
    std::vector<float> taps(static_cast<size_t>(g.kh * g.kw), 0.0f);
    for (int64_t y = 0; y < g.oh; ++y) {
      for (int64_t x = 0; x < g.ow; ++x) {
        const int64_t at = (y * g.ow + x) * g.filters + f;
        const float grad = masked && !(c.y[at] > 0.0f) ? 0.0f : c.dy[at];
        bias += grad;
        for (int64_t t = 0; t < g.kh * g.kw; ++t) {
          const float p = c.image[(y * g.sh + t / g.kw) * g.pw + x * g.sw + t % g.kw];
          taps[t] = multiply_add(fma, p, grad, taps[t]);
        }
      }
    }
    for (int64_t t = 0; t < g.kh * g.kw; ++t) dw[t * g.filters + f] += taps[t];
    db[f] += bias;
  }
}

const Shape kShapes[] = {
    {26, 26, 3, 3, 1, 1, 32},  // the Keras CNN's first layer
    {9, 7, 3, 3, 1, 1, 5},     // fewer filters than any level's vector
    {8, 9, 3, 3, 1, 1, 8},     // half of AVX-512's vector, AVX2's whole
    {7, 5, 3, 3, 1, 1, 17},    // a block and one filter more
    {6, 7, 3, 3, 1, 1, 40},    // two AVX-512 vectors and half of one
    {5, 6, 5, 5, 2, 2, 16},    // 25 taps (past one pass's group), strides 2
    {4, 3, 8, 8, 1, 3, 3},     // 64 taps, the most; stride 3 across
    {9, 9, 1, 1, 2, 1, 64},    // 1 x 1
    {3, 11, 2, 4, 3, 1, 33},   // non-square, stride 3 down
};

}  // namespace

// Calls check(case, table, flag) for every shape (its case drawn from `salt`), level and flag.
template <typename Check>
void for_every_case(uint64_t salt, const Check& check) {
  for (const Shape& s : kShapes) {
    CAPTURE(name(s));
    const Case c = make_case(s, static_cast<uint64_t>(s.filters) * salt + static_cast<uint64_t>(s.kh * s.kw));
    for (const KernelTable* table : runnable_levels()) {
      CAPTURE(simd::target_name(table->target));
      for (const bool flag : {false, true}) {
        CAPTURE(flag);
        check(c, *table, flag);
      }
    }
  }
}

TEST_CASE("one_channel_conv: its contract's chains bit for bit, on every level and shape, with and without the ReLU") {
  for_every_case(131, [](const Case& c, const KernelTable& table, bool relu) {
    std::vector<float> out(static_cast<size_t>(c.g.oh * c.g.ow * c.g.filters));
    table.one_channel_conv(c.image.data(), c.g, c.kernel.data(), c.bias.data(), relu, out.data());
    CHECK(same_bits(out, forward_contract(c, table.fma, relu)));
  });
}

TEST_CASE("one_channel_conv_gradient: its contract's chains added onto dw and db, bit for bit, masked or not, on every "
          "level and shape") {
  for_every_case(17, [](const Case& c, const KernelTable& table, bool masked) {
    std::vector<float> dw = c.dw, db = c.db, want_dw, want_db;
    table.one_channel_conv_gradient(c.image.data(), c.g, masked ? c.y.data() : nullptr, c.dy.data(), dw.data(),
                                    db.data());
    gradient_contract(c, table.fma, masked, want_dw, want_db);
    CHECK(same_bits(dw, want_dw));
    CHECK(same_bits(db, want_db));
  });
}
