// Mixed-precision dense products (onednn_matmul.h): the forward and the input gradient from
// operands rounded to bfloat16 and accumulated in float32 (against float64 on the rounded
// operands), near the float32 products, the same bits on every run and after another batch
// size; a Dense layer switched with use_bf16 whose kernel gradient is simd::product_bf16's (on a
// CPU without AVX512-BF16 or AMX the constructor refuses); and the float32 layer's products, oneDNN's
// float32 matmul where it generates AVX-512, against float64.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "common/base/error.h"
#include "common/engine/nn/layers.h"
#include "common/engine/nn/onednn_matmul.h"
#include "common/engine/simd/bf16_product.h"
#include "tests/common/engine/bf16_test_support.h"

using namespace pstrain;
using namespace pstrain::nn;
using pstrain::testing::bf16;
using pstrain::testing::random_values;

namespace {

// Largest |got - want| / (1 + |want|).
double worst_error(const std::vector<float>& got, const std::vector<double>& want) {
  double worst = 0;
  for (size_t i = 0; i < got.size(); ++i) worst = std::max(worst, std::abs(got[i] - want[i]) / (1 + std::abs(want[i])));
  return worst;
}

}  // namespace

TEST_CASE("bfloat16 matmul: forward and input gradient from rounded operands in float32, the same bits every run") {
  const int64_t in = 37, out = 21, batch = 9;  // odd sizes: no block divides them
  if (!onednn_bf16()) {
    MESSAGE("oneDNN runs " << std::string(onednn_isa()) << " here: no bfloat16 products, the constructor refuses");
    CHECK_THROWS_AS(OneDnnMatmul(in, out, false, true), Error);
    return;
  }
  const std::vector<float> x = random_values(static_cast<size_t>(batch * in), 1);
  const std::vector<float> kernel = random_values(static_cast<size_t>(in * out), 2);  // [in, out]
  const std::vector<float> bias = random_values(static_cast<size_t>(out), 3);
  const std::vector<float> dy = random_values(static_cast<size_t>(batch * out), 4);
  for (const bool relu : {false, true}) {
    CAPTURE(relu);
    OneDnnMatmul m(in, out, relu, true);
    std::vector<float> y(static_cast<size_t>(batch * out)), y_again(y.size());
    m.forward(kernel.data(), bias.data(), x.data(), batch, y.data());
    m.forward(kernel.data(), bias.data(), x.data(), batch, y_again.data());
    CHECK(y == y_again);
    std::vector<double> want(y.size()), want32(y.size());
    for (int64_t b = 0; b < batch; ++b)
      for (int64_t o = 0; o < out; ++o) {
        double acc = bias[o], acc32 = bias[o];
        for (int64_t i = 0; i < in; ++i) {
          acc += static_cast<double>(bf16(x[b * in + i])) * bf16(kernel[i * out + o]);
          acc32 += static_cast<double>(x[b * in + i]) * kernel[i * out + o];
        }
        want[b * out + o] = relu ? std::max(acc, 0.0) : acc;
        want32[b * out + o] = relu ? std::max(acc32, 0.0) : acc32;
      }
    CHECK(worst_error(y, want) < 1e-5);  // float32 accumulation of 37 terms
    const double off = worst_error(y, want32);
    MESSAGE("forward, bfloat16 against the exact product: " << off);
    CHECK(off > 1e-5);  // the operands were rounded ...
    CHECK(off < 5e-2);  // ... to 8 bits
    // Another batch size (its own primitive, the same rounded-kernel buffer) leaves this one's
    // results alone.
    std::vector<float> two(static_cast<size_t>(2 * out));
    m.forward(kernel.data(), bias.data(), x.data(), 2, two.data());
    m.forward(kernel.data(), bias.data(), x.data(), batch, y_again.data());
    CHECK(y == y_again);
    CHECK(worst_error(two, std::vector<double>(want.begin(), want.begin() + 2 * out)) < 1e-5);
  }
  OneDnnMatmul m(in, out, false, true);
  std::vector<float> dx(static_cast<size_t>(batch * in)), dx_again(dx.size());
  m.backward_data(kernel.data(), dy.data(), batch, dx.data());
  m.backward_data(kernel.data(), dy.data(), batch, dx_again.data());
  CHECK(dx == dx_again);
  std::vector<double> want(dx.size());
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t i = 0; i < in; ++i) {
      double acc = 0;
      for (int64_t o = 0; o < out; ++o) acc += static_cast<double>(bf16(dy[b * out + o])) * bf16(kernel[i * out + o]);
      want[b * in + i] = acc;
    }
  CHECK(worst_error(dx, want) < 1e-5);
}

TEST_CASE("bfloat16 matmul forward on kernels of many shapes (rounded into oneDNN's blocked layouts by ours)") {
  if (!onednn_bf16()) {
    MESSAGE("no bfloat16 products here (oneDNN " << std::string(onednn_isa()) << ")");
    return;
  }
  // The kernel's rounding writes oneDNN's BA16a<B>b2a layouts itself (simd::round_to_pair_blocks):
  // a wrong position would show as an error far above float32's.
  const int64_t batch = 5;
  for (const auto& [in, out] : std::vector<std::pair<int64_t, int64_t>>{
           {37, 21}, {64, 16}, {100, 48}, {33, 64}, {784, 700}, {300, 130}, {2048, 10}}) {
    CAPTURE(in);
    CAPTURE(out);
    const std::vector<float> x = random_values(static_cast<size_t>(batch * in), 11);
    const std::vector<float> kernel = random_values(static_cast<size_t>(in * out), 12);
    const std::vector<float> bias = random_values(static_cast<size_t>(out), 13);
    OneDnnMatmul m(in, out, false, true);
    CHECK(m.rounds_kernel_itself(batch));  // oneDNN picked a BA16a<B>b2a layout: ours wrote it
    std::vector<float> y(static_cast<size_t>(batch * out));
    m.forward(kernel.data(), bias.data(), x.data(), batch, y.data());
    std::vector<double> want(y.size());
    for (int64_t b = 0; b < batch; ++b)
      for (int64_t o = 0; o < out; ++o) {
        double acc = bias[o];
        for (int64_t i = 0; i < in; ++i) acc += static_cast<double>(bf16(x[b * in + i])) * bf16(kernel[i * out + o]);
        want[b * out + o] = acc;
      }
    CHECK(worst_error(y, want) < 1e-5 * std::sqrt(static_cast<double>(in)));
  }
}

TEST_CASE("bfloat16 matmul: once an input gradient was asked for, the forward rounds its kernel for it too, with the "
          "bits oneDNN's reorder gives") {
  if (!onednn_bf16()) {
    MESSAGE("no bfloat16 products here (oneDNN " << std::string(onednn_isa()) << ")");
    return;
  }
  const int64_t batch = 6;
  for (const auto& [in, out] : std::vector<std::pair<int64_t, int64_t>>{{37, 21}, {300, 130}, {784, 128}, {100, 48}}) {
    CAPTURE(in);
    CAPTURE(out);
    const std::vector<float> x = random_values(static_cast<size_t>(batch * in), 21);
    const std::vector<float> bias = random_values(static_cast<size_t>(out), 22);
    const std::vector<float> dy = random_values(static_cast<size_t>(batch * out), 23);
    // Kernels whose rounding shows every rule: ties to even, denormals (flushed), NaN, infinities.
    std::vector<float> first = random_values(static_cast<size_t>(in * out), 24), second = first;
    const float specials[] = {1.00390625f, 1.01171875f, -1.00390625f, 1e-39f, -1e-40f, 1.17e-38f,
                              std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN()};
    for (size_t i = 0; i < second.size(); i += 5) second[i] = specials[i / 5 % 8];
    OneDnnMatmul fresh_a(in, out, false, true), fresh_b(in, out, false, true), m(in, out, false, true);
    REQUIRE(m.rounds_kernel_itself(batch));
    std::vector<float> y(static_cast<size_t>(batch * out)), want_a(static_cast<size_t>(batch * in)), want_b(want_a.size()),
        dx(want_a.size());
    // What oneDNN's reorder gives (an input gradient without a forward before it).
    fresh_a.backward_data(first.data(), dy.data(), batch, want_a.data());
    fresh_b.backward_data(second.data(), dy.data(), batch, want_b.data());
    // m's first step rounds for its input gradient by the reorder; from its second forward on,
    // the forward's pass writes the copy the input gradient then reads.
    for (const auto* kernel : {&first, &second, &first, &second}) {
      m.forward(kernel->data(), bias.data(), x.data(), batch, y.data());
      m.backward_data(kernel->data(), dy.data(), batch, dx.data());
      const auto& want = kernel == &first ? want_a : want_b;
      CHECK(std::memcmp(dx.data(), want.data(), dx.size() * sizeof(float)) == 0);
    }
    // An input gradient of another kernel than the forward's rounds that one (the copy is not it),
    // and the forward's kernel's input gradient after it rounds again (the shared buffer holds the
    // other kernel now).
    m.forward(first.data(), bias.data(), x.data(), batch, y.data());
    m.backward_data(second.data(), dy.data(), batch, dx.data());
    CHECK(std::memcmp(dx.data(), want_b.data(), dx.size() * sizeof(float)) == 0);
    m.backward_data(first.data(), dy.data(), batch, dx.data());
    CHECK(std::memcmp(dx.data(), want_a.data(), dx.size() * sizeof(float)) == 0);
  }
}

TEST_CASE("a dense layer in bfloat16: its forward and input gradient from the matmul, its kernel gradient product_bf16's, its bias gradient float32's") {
  const int64_t in = 19, out = 7, batch = 6;
  if (!onednn_bf16()) {
    MESSAGE("no bfloat16 products here (oneDNN " << std::string(onednn_isa()) << ")");
    return;
  }
  // params: kernel [in, out] then bias.
  const std::vector<float> params = random_values(static_cast<size_t>(in * out + out), 5);
  const std::vector<float> x = random_values(static_cast<size_t>(batch * in), 6);
  const std::vector<float> dy0 = random_values(static_cast<size_t>(batch * out), 7);
  Dense<float> full(in, out, true, 0, static_cast<size_t>(in * out)), low(in, out, true, 0, static_cast<size_t>(in * out));
  low.use_bf16();
  std::vector<float> y32(static_cast<size_t>(batch * out)), y16(y32.size());
  full.forward(params.data(), ConstMatMap<float>(x.data(), in, batch), MatMap<float>(y32.data(), out, batch));
  low.forward(params.data(), ConstMatMap<float>(x.data(), in, batch), MatMap<float>(y16.data(), out, batch));
  OneDnnMatmul product(in, out, true, true);
  std::vector<float> want(y16.size());
  product.forward(params.data(), params.data() + in * out, x.data(), batch, want.data());
  CHECK(y16 == want);
  // The forward's rounded input, which the layer's kernel gradient packs (below: the bits of the
  // float32 input's): only for that input and batch size.
  const uint16_t* rounded = product.rounded_input(batch, x.data());
  REQUIRE(rounded != nullptr);
  for (int64_t i = 0; i < batch * in; ++i) CHECK(rounded[i] == simd::bf16_round(x[static_cast<size_t>(i)]));
  CHECK(product.rounded_input(batch, dy0.data()) == nullptr);
  CHECK(product.rounded_input(batch - 1, x.data()) == nullptr);
  OneDnnMatmul float32(in, out, true, false);
  float32.forward(params.data(), params.data() + in * out, x.data(), batch, want.data());
  CHECK(float32.rounded_input(batch, x.data()) == nullptr);
  product.forward(params.data(), params.data() + in * out, x.data(), batch, want.data());
  CHECK(y16 != y32);
  // Backward on the bfloat16 layer's own output (its ReLU mask): the bias gradient is the float32
  // layer's on the same output and output gradient, the kernel gradient simd::product_bf16's of
  // the same factors (the float32 layer's simd::product's is another), the input gradient the
  // matmul's.
  std::vector<float> dy16 = dy0, dy32 = dy0;
  std::vector<float> g16(params.size()), g32(params.size()), dx16(static_cast<size_t>(batch * in)), dx32(dx16.size());
  low.backward(params.data(), ConstMatMap<float>(x.data(), in, batch), ConstMatMap<float>(y16.data(), out, batch),
               MatMap<float>(dy16.data(), out, batch), g16.data(), dx16.data());
  full.backward(params.data(), ConstMatMap<float>(x.data(), in, batch), ConstMatMap<float>(y16.data(), out, batch),
                MatMap<float>(dy32.data(), out, batch), g32.data(), dx32.data());
  CHECK(std::equal(g16.begin() + in * out, g16.end(), g32.begin() + in * out));  // the bias
  std::vector<float> kernel_want(static_cast<size_t>(in * out));
  simd::product_bf16(out, in, batch, {dy32.data(), 1, out}, {x.data(), 1, in}, false, kernel_want.data(), out);
  CHECK(std::equal(kernel_want.begin(), kernel_want.end(), g16.begin()));
  CHECK(!std::equal(kernel_want.begin(), kernel_want.end(), g32.begin()));
  std::vector<float> dx_want(dx16.size());
  product.backward_data(params.data(), dy32.data(), batch, dx_want.data());  // dy32: masked like dy16
  CHECK(dx16 == dx_want);
  CHECK(dx16 != dx32);
}

TEST_CASE("float32 dense products: oneDNN's matmul where it generates AVX-512, near float64, the same bits every run") {
  const int64_t in = 45, out = 23, batch = 11;
  const std::vector<float> params = random_values(static_cast<size_t>(in * out + out), 8);
  const std::vector<float> x = random_values(static_cast<size_t>(batch * in), 9);
  const std::vector<float> dy0 = random_values(static_cast<size_t>(batch * out), 10);
  Dense<float> layer(in, out, true, 0, static_cast<size_t>(in * out));
  std::vector<float> y(static_cast<size_t>(batch * out)), y_again(y.size());
  layer.forward(params.data(), ConstMatMap<float>(x.data(), in, batch), MatMap<float>(y.data(), out, batch));
  layer.forward(params.data(), ConstMatMap<float>(x.data(), in, batch), MatMap<float>(y_again.data(), out, batch));
  CHECK(y == y_again);
  std::vector<double> want(y.size());
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t o = 0; o < out; ++o) {
      double acc = params[static_cast<size_t>(in * out + o)];
      for (int64_t i = 0; i < in; ++i) acc += static_cast<double>(x[b * in + i]) * params[i * out + o];
      want[b * out + o] = std::max(acc, 0.0);
    }
  CHECK(worst_error(y, want) < 1e-6);
  std::vector<float> dy = dy0, grads(params.size()), dx(static_cast<size_t>(batch * in));
  layer.backward(params.data(), ConstMatMap<float>(x.data(), in, batch), ConstMatMap<float>(y.data(), out, batch),
                 MatMap<float>(dy.data(), out, batch), grads.data(), dx.data());
  std::vector<double> dx_want(dx.size());
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t i = 0; i < in; ++i) {
      double acc = 0;
      for (int64_t o = 0; o < out; ++o) acc += static_cast<double>(dy[b * out + o]) * params[i * out + o];  // dy masked
      dx_want[b * in + i] = acc;
    }
  CHECK(worst_error(dx, dx_want) < 1e-6);
  if (!onednn_matmul_preferred()) {
    MESSAGE("oneDNN runs " << std::string(onednn_isa()) << " here: the dense products are BLAS's");
    return;
  }
  // Where oneDNN generates AVX-512, the layer's products are the float32 matmul's bits.
  OneDnnMatmul product(in, out, true, false);
  std::vector<float> y_mm(y.size()), dx_mm(dx.size());
  product.forward(params.data(), params.data() + in * out, x.data(), batch, y_mm.data());
  product.backward_data(params.data(), dy.data(), batch, dx_mm.data());
  CHECK(y == y_mm);
  CHECK(dx == dx_mm);
  MESSAGE("float32 dense products through oneDNN " << std::string(onednn_isa()));
  // More batch sizes than a layer keeps plans for (onednn_plans.h): each near float64, and the
  // first batch size's plan, dropped and made again, gives the same bits.
  for (int64_t b = 1; b <= 12; ++b) {
    std::vector<float> part(static_cast<size_t>(b * out));
    layer.forward(params.data(), ConstMatMap<float>(x.data(), in, std::min(b, batch)),
                  MatMap<float>(part.data(), out, std::min(b, batch)));
    part.resize(static_cast<size_t>(std::min(b, batch) * out));
    CHECK(worst_error(part, std::vector<double>(want.begin(), want.begin() + std::min(b, batch) * out)) < 1e-6);
  }
  layer.forward(params.data(), ConstMatMap<float>(x.data(), in, batch), MatMap<float>(y_again.data(), out, batch));
  CHECK(y == y_again);
  // Mixed precision switched on after float32 products were made: the bfloat16 matmul's bits.
  if (onednn_bf16()) {
    CHECK(layer.use_bf16());
    CHECK_FALSE(layer.use_bf16());
    std::vector<float> y16(y.size()), y16_want(y.size());
    layer.forward(params.data(), ConstMatMap<float>(x.data(), in, batch), MatMap<float>(y16.data(), out, batch));
    OneDnnMatmul low(in, out, true, true);
    low.forward(params.data(), params.data() + in * out, x.data(), batch, y16_want.data());
    CHECK(y16 == y16_want);
    CHECK(y16 != y);
  }
}
