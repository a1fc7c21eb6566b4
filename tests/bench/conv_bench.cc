// pstrain-conv-bench: the two methods of nn::Conv2D<float> (im2col + matrix product, and oneDNN) on
// the same layers, interleaved, as ratios.
//
// For each geometry below, repeat by repeat, it times one forward and one backward of a batch
// (float32, 1 thread, kernel and bias gradients; with --input-gradient also the input's) with
// each method in turn, on the same random parameters and inputs, and prints the median time per
// example of each (forward, backward, both) and im2col / oneDNN of both (> 1: oneDNN is faster). It also prints the largest
// difference between the two methods' outputs and gradients, relative to their scale (the two
// sum in different orders, so they agree to rounding, not bit for bit).
//
//   pstrain-conv-bench [--batch 128] [--repeats 7] [--min-ms 200] [--input-gradient] [--only TEXT] [--bf16]
//                      [--one-channel]
//
// --bf16 compares oneDNN in float32 with oneDNN's products in bfloat16 (mixed precision,
// onednn_conv.h; on a CPU with AVX512-BF16 or AMX) instead of im2col with oneDNN: the ratio is
// float32 / bfloat16 (> 1: bfloat16 is faster) and the difference bfloat16's rounding.
// --one-channel compares oneDNN (in bfloat16 with --bf16) with the one-channel method (layers.h;
// float32 in either precision) on the geometries it runs (one input channel): ratio > 1, the
// one-channel method is faster.
//
// (--only: the geometries whose name contains TEXT.) The first line names the CPU, the level of our
// kernels and oneDNN's instruction set; PSTRAIN_CPU_TARGET and OPENBLAS_CORETYPE run a smaller
// CPU's code (tests/bench/engine_bench.sh --targets does so for each level).
//
// The geometries span the first layers of common image models (1 and 3 channels, 3 x 3 and
// 5 x 5 kernels, valid and same padding, strides 1 and 2, few and many filters) and, for
// contrast, deeper layers whose patches are larger.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "common/base/aligned.h"
#include "common/engine/compute_threads.h"
#include "common/engine/model_spec.h"
#include "common/engine/nn/layers.h"
#include "common/engine/simd/cpu_target.h"

namespace pstrain {
namespace {

using Clock = std::chrono::steady_clock;
using Conv = nn::Conv2D<float>;
using Buffer = std::vector<float, CacheAlignedAllocator<float>>;

struct Case {
  const char* name;
  int64_t height, width, channels, kernel, filters, stride;
  bool same;  // TensorFlow's "same" padding, else "valid"
};

const Case kCases[] = {
    {"28x28x1 k3 f32 (Keras / Fashion CNN conv1)", 28, 28, 1, 3, 32, 1, false},
    {"28x28x1 k3 f8", 28, 28, 1, 3, 8, 1, false},
    {"28x28x1 k5 f32", 28, 28, 1, 5, 32, 1, false},
    {"28x28x1 k3 f64 same", 28, 28, 1, 3, 64, 1, true},
    {"32x32x3 k3 f32 same (CIFAR conv1)", 32, 32, 3, 3, 32, 1, true},
    {"32x32x3 k3 f20 same stride 2", 32, 32, 3, 3, 20, 2, true},
    {"16x16x4 k3 f32 (patch 36)", 16, 16, 4, 3, 32, 1, false},
    {"32x32x3 k4 f32 (patch 48)", 32, 32, 3, 4, 32, 1, false},
    {"32x32x3 k5 f32 (patch 75)", 32, 32, 3, 5, 32, 1, false},
    {"16x16x8 k3 f32 (patch 72)", 16, 16, 8, 3, 32, 1, false},
    {"8x8x16 k1 f64 (1 x 1, patch 16)", 8, 8, 16, 1, 64, 1, false},
    {"13x13x32 k3 f64 (Fashion CNN conv2, patch 288)", 13, 13, 32, 3, 64, 1, false},
    {"16x16x32 k3 f64 same (patch 288)", 16, 16, 32, 3, 64, 1, true},
    {"8x8x64 k3 f128 same (patch 576)", 8, 8, 64, 3, 128, 1, true},
    {"4x4x128 k3 f256 same (patch 1152)", 4, 4, 128, 3, 256, 1, true},
    // The residual CNN's (deploy/jobs/fashion-mnist-resnet.json) after its stem.
    {"28x28x32 k3 f32 same (residual CNN block 1)", 28, 28, 32, 3, 32, 1, true},
    {"14x14x32 k3 f64 same (residual CNN widening)", 14, 14, 32, 3, 64, 1, true},
    {"14x14x64 k3 f64 same (residual CNN block 2)", 14, 14, 64, 3, 64, 1, true},
};

Conv::Geometry geometry(const Case& c) {
  const Padding padding = c.same ? Padding::kSame : Padding::kValid;
  const WindowAxis rows = window_axis(c.height, c.kernel, c.stride, padding);
  const WindowAxis cols = window_axis(c.width, c.kernel, c.stride, padding);
  return {c.height, c.width, c.channels, c.kernel, c.kernel, c.filters, c.stride, c.stride,
          rows.pad_before, cols.pad_before, rows.out, cols.out};
}

struct Run {
  Buffer out, dy, grads, din;
};

struct Seconds {
  double forward = 0, backward = 0;
};

// One forward and backward.
Seconds step(Conv& conv, const Buffer& params, const Buffer& in, int64_t in_size, int64_t out_size, int64_t batch,
             const Buffer& dout, bool input_gradient, Run& run) {
  std::copy(dout.begin(), dout.end(), run.dy.begin());  // backward masks its output gradient in place
  const auto start = Clock::now();
  conv.forward(params.data(), nn::ConstMatMap<float>(in.data(), in_size, batch),
               nn::MatMap<float>(run.out.data(), out_size, batch));
  const auto middle = Clock::now();
  conv.backward(params.data(), nn::ConstMatMap<float>(in.data(), in_size, batch),
                nn::ConstMatMap<float>(run.out.data(), out_size, batch),
                nn::MatMap<float>(run.dy.data(), out_size, batch), run.grads.data(),
                input_gradient ? run.din.data() : nullptr);
  const auto end = Clock::now();
  return {std::chrono::duration<double>(middle - start).count(), std::chrono::duration<double>(end - middle).count()};
}

double max_relative_difference(const Buffer& a, const Buffer& b) {
  double scale = 0, diff = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    scale = std::max(scale, static_cast<double>(std::fabs(a[i])));
    diff = std::max(diff, static_cast<double>(std::fabs(a[i] - b[i])));
  }
  return scale == 0 ? diff : diff / scale;
}

int run(int argc, char** argv) {
  int64_t batch = 128, repeats = 7;
  double min_ms = 200;
  bool input_gradient = false, bf16 = false, one_channel = false;
  std::string only;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&](const char* flag) {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "%s needs a value\n", flag);
        std::exit(2);
      }
      return std::strtod(argv[++i], nullptr);
    };
    if (a == "--batch") {
      batch = static_cast<int64_t>(value("--batch"));
    } else if (a == "--repeats") {
      repeats = static_cast<int64_t>(value("--repeats"));
    } else if (a == "--min-ms") {
      min_ms = value("--min-ms");
    } else if (a == "--only" && i + 1 < argc) {
      only = argv[++i];
    } else if (a == "--input-gradient") {
      input_gradient = true;
    } else if (a == "--bf16") {
      bf16 = true;
    } else if (a == "--one-channel") {
      one_channel = true;
    } else {
      std::fprintf(stderr,
                   "usage: pstrain-conv-bench [--batch N] [--repeats N] [--min-ms MS] [--input-gradient] [--only TEXT] [--bf16] [--one-channel]\n");
      return a == "--help" ? 0 : 2;
    }
  }
  if (batch < 1 || repeats < 1 || min_ms <= 0) {
    std::fprintf(stderr, "--batch and --repeats must be >= 1 and --min-ms > 0\n");
    return 2;
  }
  if (bf16 && !nn::onednn_bf16()) {
    std::fprintf(stderr, "--bf16: oneDNN runs %s here, without bfloat16 products\n", nn::onednn_isa());
    return 1;
  }
  // The two methods compared: [0] the baseline, [1] the candidate.
  Conv::Method methods[2] = {bf16 ? Conv::Method::kOneDnn : Conv::Method::kIm2col,
                             bf16 ? Conv::Method::kOneDnnBf16 : Conv::Method::kOneDnn};
  const char* a_name = bf16 ? "f32" : "im2col";
  const char* b_name = bf16 ? "bf16" : "oneDNN";
  if (one_channel) {
    methods[0] = bf16 ? Conv::Method::kOneDnnBf16 : Conv::Method::kOneDnn;
    methods[1] = Conv::Method::kOneChannel;
    a_name = bf16 ? "dnn-bf16" : "oneDNN";
    b_name = "direct";
  }
  set_compute_threads(1);  // as the trainer with --threads 1: OpenBLAS on this thread only
  std::printf("CPU: %s; oneDNN %s\n", simd::describe_cpu().c_str(), nn::onednn_isa());
  std::printf("batch %lld, %lld repeats, %s; us per example (median), forward + backward\n",
              static_cast<long long>(batch), static_cast<long long>(repeats),
              input_gradient ? "with the input gradient" : "kernel and bias gradients only (a first layer)");
  std::printf("%-48s %5s %17s %17s %17s %6s %9s\n", "", "", "forward", "backward", "both", "", "");
  std::printf("%-48s %5s %8s %8s %8s %8s %8s %8s %6s %9s\n", "layer", "patch", a_name, b_name, a_name, b_name, a_name,
              b_name, "ratio", "max diff");
  std::mt19937 rng(20);
  std::normal_distribution<float> normal(0.f, 1.f);
  for (const Case& c : kCases) {
    if (std::string(c.name).find(only) == std::string::npos) continue;
    const Conv::Geometry g = geometry(c);
    if (one_channel && !Conv::one_channel(g)) continue;
    const int64_t in_size = g.height * g.width * g.channels, out_size = g.out_h * g.out_w * g.filters;
    Buffer params(g.patch_size() * g.filters + g.filters), in(in_size * batch), dout(out_size * batch);
    for (auto& v : params) v = normal(rng) * 0.3f;
    for (auto& v : in) v = std::max(0.f, normal(rng));  // images: nonnegative, some zeros
    for (auto& v : dout) v = normal(rng) * 1e-3f;
    Conv onednn(g, true, 0, g.patch_size() * g.filters, batch), im2col(g, true, 0, g.patch_size() * g.filters, batch);
    onednn.set_method(methods[1]);
    im2col.set_method(methods[0]);
    Run runs[2];
    for (Run& r : runs) {
      r.out.resize(out_size * batch);
      r.dy.resize(out_size * batch);
      r.grads.resize(params.size());
      r.din.resize(in_size * batch);
    }
    // Iterations per timing: enough for min_ms with the slower method.
    auto total = [](Seconds t) { return t.forward + t.backward; };
    const double once =
        std::max(total(step(onednn, params, in, in_size, out_size, batch, dout, input_gradient, runs[0])),
                 total(step(im2col, params, in, in_size, out_size, batch, dout, input_gradient, runs[1])));
    const int64_t iterations = std::max<int64_t>(1, static_cast<int64_t>(min_ms / 1e3 / once));
    std::vector<double> times[2][3];  // [method][forward, backward, both]: us per example
    for (int64_t r = 0; r < repeats; ++r) {
      for (int m = 0; m < 2; ++m) {
        Conv& conv = m == 0 ? im2col : onednn;
        Seconds sum;
        for (int64_t i = 0; i < iterations; ++i) {
          const Seconds t = step(conv, params, in, in_size, out_size, batch, dout, input_gradient, runs[m]);
          sum.forward += t.forward;
          sum.backward += t.backward;
        }
        const double scale = 1e6 / static_cast<double>(iterations * batch);
        times[m][0].push_back(sum.forward * scale);
        times[m][1].push_back(sum.backward * scale);
        times[m][2].push_back(total(sum) * scale);
      }
    }
    double median[2][3];
    for (int m = 0; m < 2; ++m) {
      for (int k = 0; k < 3; ++k) {
        std::sort(times[m][k].begin(), times[m][k].end());
        median[m][k] = times[m][k][times[m][k].size() / 2];
      }
    }
    // The difference between the methods, from one more step of each without ReLU: with it, a
    // pre-activation within rounding of zero may fall on either side under the two orders of
    // addition, and one output gradient term then counts in one method's sums only (it made a
    // 1.7e-2 "difference" on the 1,152-value row, while both methods were right to rounding).
    Conv plain[2] = {Conv(g, false, 0, g.patch_size() * g.filters, batch),
                     Conv(g, false, 0, g.patch_size() * g.filters, batch)};
    plain[0].set_method(methods[0]);
    plain[1].set_method(methods[1]);
    for (int m = 0; m < 2; ++m) step(plain[m], params, in, in_size, out_size, batch, dout, input_gradient, runs[m]);
    double diff = std::max(max_relative_difference(runs[0].out, runs[1].out),
                           max_relative_difference(runs[0].grads, runs[1].grads));
    if (input_gradient) diff = std::max(diff, max_relative_difference(runs[0].din, runs[1].din));
    std::printf("%-48s %5lld %8.2f %8.2f %8.2f %8.2f %8.2f %8.2f %6.2f %9.1e\n", c.name,
                static_cast<long long>(g.patch_size()), median[0][0], median[1][0], median[0][1], median[1][1],
                median[0][2], median[1][2], median[0][2] / median[1][2], diff);
    std::fflush(stdout);
  }
  return 0;
}

}  // namespace
}  // namespace pstrain

int main(int argc, char** argv) { return pstrain::run(argc, argv); }
