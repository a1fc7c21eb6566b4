// Mixed-precision convolution (onednn_conv.h, bf16 = true): the products of the input and the
// kernel rounded to bfloat16, accumulated in float32 (against a float64 convolution of the
// rounded operands), gradients near the float32 ones, the same bits on every run, and an example's
// output independent of its batch. On a CPU without AVX512-BF16 or AMX the constructor refuses.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "common/base/error.h"
#include "common/engine/nn/onednn_conv.h"
#include "tests/common/engine/bf16_test_support.h"

using namespace pstrain;
using namespace pstrain::nn;
using pstrain::testing::bf16;
using pstrain::testing::random_values;

namespace {

// "same" padding, stride 1, NHWC input, HWIO kernel: y in float64 from bfloat16-rounded operands.
std::vector<double> reference(const ConvGeometry& g, const std::vector<float>& x, const std::vector<float>& k,
                              const std::vector<float>& bias, int64_t batch) {
  std::vector<double> y(static_cast<size_t>(batch * g.out_h * g.out_w * g.filters));
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t i = 0; i < g.out_h; ++i)
      for (int64_t j = 0; j < g.out_w; ++j)
        for (int64_t f = 0; f < g.filters; ++f) {
          double acc = bias[static_cast<size_t>(f)];
          for (int64_t u = 0; u < g.kernel_h; ++u)
            for (int64_t v = 0; v < g.kernel_w; ++v) {
              const int64_t r = i + u - g.pad_top, c = j + v - g.pad_left;
              if (r < 0 || r >= g.height || c < 0 || c >= g.width) continue;
              for (int64_t ch = 0; ch < g.channels; ++ch) {
                acc += static_cast<double>(bf16(x[static_cast<size_t>(((b * g.height + r) * g.width + c) * g.channels + ch)])) *
                       bf16(k[static_cast<size_t>(((u * g.kernel_w + v) * g.channels + ch) * g.filters + f)]);
              }
            }
          y[static_cast<size_t>(((b * g.out_h + i) * g.out_w + j) * g.filters + f)] = acc;
        }
  return y;
}

double max_relative(const std::vector<float>& a, const std::vector<float>& b) {
  double worst = 0, scale = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    worst = std::max(worst, std::abs(static_cast<double>(a[i]) - b[i]));
    scale = std::max(scale, std::abs(static_cast<double>(b[i])));
  }
  return worst / std::max(scale, 1e-30);
}

}  // namespace

TEST_CASE("bfloat16 convolution: products of rounded operands accumulated in float32, gradients near float32's, the same bits every run") {
  ConvGeometry g{12, 12, 3, 3, 3, 16};
  g.pad_top = g.pad_left = 1;
  g.out_h = g.out_w = 12;
  if (!onednn_bf16()) {
    MESSAGE("oneDNN runs " << std::string(onednn_isa()) << " here: no bfloat16 products, the constructor refuses");
    CHECK_THROWS_AS(OneDnnConv(g, false, true), Error);
    return;
  }
  const int64_t batch = 5;
  const std::vector<float> x = random_values(static_cast<size_t>(batch * 12 * 12 * 3), 1);
  const std::vector<float> kernel = random_values(static_cast<size_t>(3 * 3 * 3 * 16), 2);
  const std::vector<float> bias = random_values(16, 3);
  const std::vector<float> dy = random_values(static_cast<size_t>(batch * 12 * 12 * 16), 4);
  OneDnnConv low(g, false, true), full(g, false, false);
  std::vector<float> y(dy.size()), y_again(dy.size()), y32(dy.size());
  low.forward(kernel.data(), bias.data(), x.data(), batch, y.data());
  low.forward(kernel.data(), bias.data(), x.data(), batch, y_again.data());
  full.forward(kernel.data(), bias.data(), x.data(), batch, y32.data());
  CHECK(y == y_again);
  // Against float64 on the rounded operands: float32 accumulation's error only (27 terms).
  const std::vector<double> want = reference(g, x, kernel, bias, batch);
  double worst = 0;
  for (size_t i = 0; i < y.size(); ++i) worst = std::max(worst, std::abs(y[i] - want[i]) / (1 + std::abs(want[i])));
  CHECK(worst < 1e-5);
  // Against float32: bfloat16's 8 bits of precision.
  const double off = max_relative(y, y32);
  MESSAGE("forward: bfloat16 against float32 " << off);
  CHECK(off > 0);
  CHECK(off < 3e-2);
  // An example alone gives its bits in the batch.
  std::vector<float> one(static_cast<size_t>(12 * 12 * 16));
  low.forward(kernel.data(), bias.data(), x.data() + 2 * 12 * 12 * 3, 1, one.data());
  CHECK(std::equal(one.begin(), one.end(), y.begin() + 2 * 12 * 12 * 16));

  // Gradients: float32 results near float32's, the same bits on repeat.
  std::vector<float> dk(kernel.size()), db(16), dx(x.size()), dk2(kernel.size()), db2(16), dx2(x.size());
  std::vector<float> dk32(kernel.size()), db32(16), dx32(x.size());
  low.backward_weights(x.data(), dy.data(), batch, dk.data(), db.data());
  low.backward_data(kernel.data(), dy.data(), batch, dx.data());
  low.backward_weights(x.data(), dy.data(), batch, dk2.data(), db2.data());
  low.backward_data(kernel.data(), dy.data(), batch, dx2.data());
  full.backward_weights(x.data(), dy.data(), batch, dk32.data(), db32.data());
  full.backward_data(kernel.data(), dy.data(), batch, dx32.data());
  CHECK(dk == dk2);
  CHECK(db == db2);
  CHECK(dx == dx2);
  MESSAGE("kernel gradient " << max_relative(dk, dk32) << ", bias " << max_relative(db, db32) << ", input " << max_relative(dx, dx32));
  CHECK(max_relative(dk, dk32) < 3e-2);
  CHECK(max_relative(db, db32) < 3e-2);
  CHECK(max_relative(dx, dx32) < 3e-2);
}
