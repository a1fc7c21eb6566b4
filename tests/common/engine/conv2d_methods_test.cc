// Conv2D's methods (im2col, and oneDNN and the one-channel method for float) against a convolution written from its
// definition, on geometries that reach every branch: windows inside and over padding, strides,
// non-square kernels, filter counts below, at and past a vector's width, odd position counts,
// ReLU or not, with and without the input gradient. The gradient checks (gradient_check_test.cc)
// cover the layer inside models with the method the constructor picks; this test makes sure each
// method computes the same thing. The oneDNN method must also be exact where the equivalence of
// N workers and one depends on it: the same bits on every run, and an example's output and input
// gradient independent of its batch (onednn_conv.h).
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "common/base/aligned.h"
#include "common/engine/compute_threads.h"
#include "common/engine/model_spec.h"
#include "common/base/error.h"
#include "common/engine/nn/layers.h"
#include "tests/common/engine/gradient_check.h"

using namespace pstrain;

namespace {

template <typename T>
using Conv = nn::Conv2D<T>;
template <typename T>
using Geometry = typename nn::Conv2D<T>::Geometry;

struct Shape {
  int64_t height, width, channels, kernel_h, kernel_w, filters, stride_h, stride_w;
  bool same;
  int64_t dilation_h = 1, dilation_w = 1;
};

template <typename T>
Geometry<T> geometry(const Shape& s) {  // TensorFlow's output sizes and padding split, as the model's
  const Padding padding = s.same ? Padding::kSame : Padding::kValid;
  const WindowAxis rows = window_axis(s.height, dilated_extent(s.kernel_h, s.dilation_h), s.stride_h, padding);
  const WindowAxis cols = window_axis(s.width, dilated_extent(s.kernel_w, s.dilation_w), s.stride_w, padding);
  return {s.height, s.width, s.channels, s.kernel_h, s.kernel_w, s.filters, s.stride_h, s.stride_w,
          rows.pad_before, cols.pad_before, rows.out, cols.out, s.dilation_h, s.dilation_w};
}

// The layer's parameters sit inside a larger buffer at these offsets, so that writing outside
// its own slices shows.
constexpr size_t kKernelAt = 3;

template <typename T>
struct Result {
  std::vector<T> out, grads, din;
};

// The convolution from its definition. Kernel entry (f, p) is kernel[f + p * filters], with
// p = (ky * kernel_w + kx) * channels + c; images and outputs are [h, w, c] per example.
template <typename T>
Result<T> reference(const Geometry<T>& g, bool relu, const std::vector<T>& params, size_t bias_at,
                    const std::vector<T>& in, const std::vector<T>& dout, int64_t batch) {
  const int64_t in_size = g.height * g.width * g.channels, out_size = g.out_h * g.out_w * g.filters;
  Result<T> r;
  r.out.assign(out_size * batch, T(0));
  r.grads.assign(params.size(), T(0));
  r.din.assign(in_size * batch, T(0));
  auto input_at = [&](int64_t b, int64_t y, int64_t x, int64_t ky, int64_t kx, int64_t c, int64_t& index) {
    const int64_t iy = y * g.stride_h - g.pad_top + ky * g.dilation_h;
    const int64_t ix = x * g.stride_w - g.pad_left + kx * g.dilation_w;
    if (iy < 0 || iy >= g.height || ix < 0 || ix >= g.width) return false;
    index = b * in_size + (iy * g.width + ix) * g.channels + c;
    return true;
  };
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t y = 0; y < g.out_h; ++y) {
      for (int64_t x = 0; x < g.out_w; ++x) {
        for (int64_t f = 0; f < g.filters; ++f) {
          const int64_t o = b * out_size + (y * g.out_w + x) * g.filters + f;
          T sum = params[bias_at + f];
          for (int64_t ky = 0; ky < g.kernel_h; ++ky) {
            for (int64_t kx = 0; kx < g.kernel_w; ++kx) {
              for (int64_t c = 0; c < g.channels; ++c) {
                int64_t i;
                const int64_t p = (ky * g.kernel_w + kx) * g.channels + c;
                if (input_at(b, y, x, ky, kx, c, i)) sum += params[kKernelAt + f + p * g.filters] * in[i];
              }
            }
          }
          r.out[o] = relu && sum < T(0) ? T(0) : sum;
          const T grad = relu && !(r.out[o] > T(0)) ? T(0) : dout[o];
          r.grads[bias_at + f] += grad;
          for (int64_t ky = 0; ky < g.kernel_h; ++ky) {
            for (int64_t kx = 0; kx < g.kernel_w; ++kx) {
              for (int64_t c = 0; c < g.channels; ++c) {
                int64_t i;
                const int64_t p = (ky * g.kernel_w + kx) * g.channels + c;
                if (!input_at(b, y, x, ky, kx, c, i)) continue;
                r.grads[kKernelAt + f + p * g.filters] += grad * in[i];
                r.din[i] += grad * params[kKernelAt + f + p * g.filters];
              }
            }
          }
        }
      }
    }
  }
  return r;
}

template <typename T>
Result<T> run(const Geometry<T>& g, bool relu, typename Conv<T>::Method method, const std::vector<T>& params,
              size_t bias_at, const std::vector<T>& in, const std::vector<T>& dout, int64_t batch,
              int64_t max_batch, bool input_gradient, T sentinel) {
  const int64_t in_size = g.height * g.width * g.channels, out_size = g.out_h * g.out_w * g.filters;
  Conv<T> conv(g, relu, kKernelAt, bias_at, max_batch);
  conv.set_method(method);
  Result<T> r;
  r.out.assign(out_size * batch, sentinel);
  r.grads.assign(params.size(), sentinel);
  r.din.assign(in_size * batch, sentinel);
  std::vector<T> dy = dout;
  conv.forward(params.data(), nn::ConstMatMap<T>(in.data(), in_size, batch), nn::MatMap<T>(r.out.data(), out_size, batch));
  conv.backward(params.data(), nn::ConstMatMap<T>(in.data(), in_size, batch),
                nn::ConstMatMap<T>(r.out.data(), out_size, batch), nn::MatMap<T>(dy.data(), out_size, batch),
                r.grads.data(), input_gradient ? r.din.data() : nullptr);
  return r;
}

// Largest |a - b| over the entries in [from, to) of each, relative to the largest |b| (at least 1).
template <typename T>
double max_difference(const std::vector<T>& a, const std::vector<T>& b, size_t from, size_t to) {
  double diff = 0, scale = 1;
  for (size_t i = from; i < to; ++i) {
    diff = std::max(diff, std::fabs(static_cast<double>(a[i]) - static_cast<double>(b[i])));
    scale = std::max(scale, std::fabs(static_cast<double>(b[i])));
  }
  return diff / scale;
}

const Shape kShapes[] = {
    {28, 28, 1, 3, 3, 32, 1, 1, false},  // the reference CNNs' first layer
    {9, 7, 1, 3, 3, 5, 1, 1, false},     // 35 positions: neither groups of 4 nor blocks of 16 fit
    {8, 8, 3, 3, 3, 17, 1, 1, true},     // same padding, 17 filters: two tiles and a rest (double: 8 per tile)
    {9, 11, 2, 3, 2, 3, 2, 2, true},     // strides 2, non-square kernel, odd sizes, 3 filters
    {6, 5, 4, 5, 5, 8, 1, 1, true},      // a kernel as large as the input: every window over padding
    {7, 9, 3, 2, 4, 1, 1, 3, false},     // one filter, stride 3 across
    {5, 5, 2, 1, 1, 16, 1, 1, false},    // 1 x 1
    {6, 6, 32, 3, 3, 9, 1, 1, true},     // a patch of 288
    {5, 4, 40, 3, 3, 4, 1, 1, false},    // a patch of 360
    {4, 4, 128, 3, 3, 256, 1, 1, true},  // a patch of 1,152, 256 filters
    {9, 9, 2, 3, 3, 5, 1, 1, false, 2, 2},   // dilated 2: the kernel spans 5 x 5
    {8, 7, 3, 3, 2, 4, 1, 1, true, 2, 3},    // dilated 2 x 3, same padding (taps over the edges)
    {6, 6, 1, 2, 2, 3, 1, 1, true, 4, 4},    // dilation past the input: most taps read padding
    // One input channel (the one-channel method too): padding, strides, non-square kernels, filter
    // counts around a vector's width, a kernel past one pass's group of taps.
    {9, 11, 1, 3, 2, 3, 2, 2, true},
    {7, 9, 1, 5, 5, 40, 1, 1, true},
    {10, 8, 1, 4, 3, 8, 3, 1, false},
    {6, 7, 1, 1, 1, 17, 1, 2, true},
};

std::string name(const Shape& s) {
  return std::to_string(s.height) + "x" + std::to_string(s.width) + "x" + std::to_string(s.channels) + " k" +
         std::to_string(s.kernel_h) + "x" + std::to_string(s.kernel_w) + " f" + std::to_string(s.filters) + " s" +
         std::to_string(s.stride_h) + "x" + std::to_string(s.stride_w) + (s.same ? " same" : " valid") +
         (s.dilation_h * s.dilation_w > 1 ? " d" + std::to_string(s.dilation_h) + "x" + std::to_string(s.dilation_w) : "");
}

template <typename T>
const char* method_name(typename Conv<T>::Method m) {
  switch (m) {
    case Conv<T>::Method::kIm2col: return "im2col";
    case Conv<T>::Method::kOneDnn: return "oneDNN";
    case Conv<T>::Method::kOneDnnBf16: return "oneDNN bf16";
    case Conv<T>::Method::kOneChannel: return "one channel";
  }
  return "?";
}

template <typename T>
void check_methods(double tolerance) {
  // One thread, as the trainer with --threads 1. Also: OpenBLAS's own threads are invisible to
  // ThreadSanitizer (docs/SANITIZERS.md), which reported the im2col products' as races.
  set_compute_threads(1);
  std::mt19937 rng(7);
  std::normal_distribution<double> normal(0, 1);
  for (const Shape& s : kShapes) {
    const Geometry<T> g = geometry<T>(s);
    const int64_t batch = 3, max_batch = 5;
    const int64_t in_size = g.height * g.width * g.channels, out_size = g.out_h * g.out_w * g.filters;
    const size_t bias_at = kKernelAt + g.patch_size() * g.filters + 2;  // a gap between kernel and bias
    std::vector<T> params(bias_at + g.filters + 4), in(in_size * batch), dout(out_size * batch);
    for (auto& v : params) v = static_cast<T>(normal(rng) * 0.5);
    for (auto& v : in) v = static_cast<T>(normal(rng));
    for (auto& v : dout) v = static_cast<T>(normal(rng));
    for (const bool relu : {true, false}) {
      const Result<T> want = reference(g, relu, params, bias_at, in, dout, batch);
      std::vector<typename Conv<T>::Method> methods{Conv<T>::Method::kIm2col};
      if (std::is_same_v<T, float> && nn::onednn_available() && !g.dilated()) methods.push_back(Conv<T>::Method::kOneDnn);
      if (Conv<T>::one_channel(g)) methods.push_back(Conv<T>::Method::kOneChannel);
      for (const auto method : methods) {
        for (const bool input_gradient : {false, true}) {
          CAPTURE(name(s));
          CAPTURE(relu);
          CAPTURE(method_name<T>(method));
          CAPTURE(input_gradient);
          const T sentinel = T(777);
          const Result<T> got = run(g, relu, method, params, bias_at, in, dout, batch, max_batch, input_gradient, sentinel);
          CHECK(max_difference(got.out, want.out, 0, want.out.size()) < tolerance);
          CHECK(max_difference(got.grads, want.grads, kKernelAt, kKernelAt + g.patch_size() * g.filters) < tolerance);
          CHECK(max_difference(got.grads, want.grads, bias_at, bias_at + g.filters) < tolerance);
          // Nothing outside the layer's own gradient slices is written.
          for (size_t i = 0; i < params.size(); ++i) {
            const bool own = (i >= kKernelAt && i < kKernelAt + g.patch_size() * g.filters) ||
                             (i >= bias_at && i < bias_at + g.filters);
            if (!own) CHECK(got.grads[i] == sentinel);
          }
          if (input_gradient) CHECK(max_difference(got.din, want.din, 0, want.din.size()) < tolerance);
        }
      }
    }
  }
}

}  // namespace

TEST_CASE("conv2d: im2col computes the convolution's definition - double") { check_methods<double>(1e-12); }

TEST_CASE("conv2d: im2col, oneDNN and the one-channel method compute the convolution's definition - float") {
  MESSAGE("oneDNN: " << (nn::onednn_available() ? nn::onednn_isa() : "not in this build"));
  check_methods<float>(2e-5);
}

TEST_CASE("conv2d: oneDNN is the float default where it generates direct code, and double is im2col") {
  CHECK(Conv<float>::default_method() ==
        (nn::onednn_preferred() ? Conv<float>::Method::kOneDnn : Conv<float>::Method::kIm2col));
  CHECK(Conv<double>::default_method() == Conv<double>::Method::kIm2col);
}

TEST_CASE("conv2d: a float layer on one input channel takes the one-channel method, in either precision's model") {
  for (const auto& s : kShapes) {
    CAPTURE(name(s));
    const bool one = s.channels == 1 && s.dilation_h * s.dilation_w == 1;
    const Conv<float> layer(geometry<float>(s), true, 0, 1000, 4);
    CHECK((layer.method() == Conv<float>::Method::kOneChannel) == one);
    CHECK(Conv<float>::one_channel(geometry<float>(s)) == one);
    CHECK(!Conv<double>::one_channel(geometry<double>(s)));
  }
  // Past the kernels' taps: the general methods.
  const auto large = kShapes[0];
  Geometry<float> g = geometry<float>(large);
  g.channels = 1, g.kernel_h = 9, g.kernel_w = 9;  // 81 taps
  CHECK(!Conv<float>::one_channel(g));
}

TEST_CASE("conv2d oneDNN and one-channel: the same bits on every run, and an example's values independent of its batch") {
  set_compute_threads(2);  // the layer must plan on one thread whatever the caller allows
  std::mt19937 rng(11);
  std::normal_distribution<float> normal(0, 1);
  for (const auto& s : kShapes) {
    if (s.dilation_h * s.dilation_w > 1) continue;  // dilated kernels run on im2col
    CAPTURE(name(s));
    const Geometry<float> g = geometry<float>(s);
    const int64_t batch = 13, part = 5, offset = 7;  // examples 7..11 again as a batch of 5
    const int64_t in_size = g.height * g.width * g.channels, out_size = g.out_h * g.out_w * g.filters;
    const size_t bias_at = kKernelAt + g.patch_size() * g.filters;
    std::vector<float> params(bias_at + g.filters), in(in_size * batch), dout(out_size * batch);
    for (auto& v : params) v = normal(rng) * 0.5f;
    for (auto& v : in) v = normal(rng);
    for (auto& v : dout) v = normal(rng);
    std::vector<Conv<float>::Method> methods;
    if (nn::onednn_available()) methods.push_back(Conv<float>::Method::kOneDnn);
    if (Conv<float>::one_channel(g)) methods.push_back(Conv<float>::Method::kOneChannel);
    for (const auto method : methods) {
      CAPTURE(method_name<float>(method));
      const Result<float> a = run(g, true, method, params, bias_at, in, dout, batch, batch, true, 0.0f);
      const Result<float> b = run(g, true, method, params, bias_at, in, dout, batch, batch, true, 0.0f);
      CHECK(a.out == b.out);
      CHECK(a.grads == b.grads);
      CHECK(a.din == b.din);
      const std::vector<float> in_part(in.begin() + offset * in_size, in.begin() + (offset + part) * in_size);
      const std::vector<float> dout_part(dout.begin() + offset * out_size, dout.begin() + (offset + part) * out_size);
      const Result<float> c = run(g, true, method, params, bias_at, in_part, dout_part, part, batch, true, 0.0f);
      CHECK(std::equal(c.out.begin(), c.out.end(), a.out.begin() + offset * out_size));
      CHECK(std::equal(c.din.begin(), c.din.end(), a.din.begin() + offset * in_size));
    }
  }
  set_compute_threads(1);
}

TEST_CASE("conv2d dilation_rate: gradients through a model, the spec's rules, and its JSON") {
  ModelSpec spec;
  spec.input_shape = {9, 8, 2};
  LayerSpec conv;
  conv.type = LayerType::kConv2D;
  conv.filters = 3;
  conv.kernel_size = {3, 2};
  conv.dilation_rate = {2, 3};
  conv.activation = Activation::kTanh;
  LayerSpec flat, out;
  flat.type = LayerType::kFlatten;
  out.units = 4;
  spec.layers = {conv, flat, out};
  // valid: 9 - 5 + 1 = 5 rows, 8 - 4 + 1 = 5 columns.
  CHECK(infer_shapes(spec)[0] == pstrain::Shape{5, 5, 3});
  testing::check_gradients(spec, 3, 71);
  spec.layers[0].padding = Padding::kSame;
  CHECK(infer_shapes(spec)[0] == pstrain::Shape{9, 8, 3});
  testing::check_gradients(spec, 3, 72);
  // A dilated kernel larger than the input, and dilation with strides, are refused naming the field.
  spec.layers[0].padding = Padding::kValid;
  spec.layers[0].dilation_rate = {5, 1};
  CHECK_THROWS_WITH_AS(infer_shapes(spec), "/model/layers/0/kernel_size [3, 2] dilated by [5, 1] does not fit the input [9, 8, 2]",
                       SpecError);
  spec.layers[0].dilation_rate = {2, 2};
  spec.layers[0].strides = std::array<int64_t, 2>{2, 2};
  CHECK_THROWS_WITH_AS(infer_shapes(spec), "/model/layers/0/dilation_rate above 1 needs strides of 1 (as in Keras), not [2, 2]",
                       SpecError);
}
