// pstrain-kernel-bench: the engine's fixed-order product (common/engine/simd/kernels.h) against OpenBLAS's
// sgemm on the dense layers' shapes, at the level in use (PSTRAIN_CPU_TARGET caps it and oneDNN;
// OPENBLAS_CORETYPE picks OpenBLAS's kernels), interleaved, 1 thread; for the forward and the
// input gradient also oneDNN's float32 matmul as the dense layer calls it (onednn_matmul.h; "-"
// where oneDNN generates less than AVX2; the layer itself uses it at AVX-512 only). Prints GFLOP/s of each and
// the ratios ours / BLAS and oneDNN / BLAS; for the kernel gradients also mixed precision's
// bfloat16 product (simd/bf16_product.h) where the CPU runs it natively, and its ratio to ours.
// Then a data-parallel step's dense kernel gradients on --replicas threads (default 2), the two
// ways nn::DataParallelModel can compute them with the same bits: each thread its slice's whole
// product, then the buffers summed (as before simd/segmented_product.h), against
// product_segments splitting the kernel into blocks over the threads; and whole steps of three
// models both ways (DataParallelModel::multiply_kernels_together); and whole trainer steps with
// the step's tail (replica sum, scaling, Adam) in separate passes or inside the update; interleaved,
// as ratios.
//
//   pstrain-kernel-bench [--repeats 5] [--min-ms 100] [--replicas 2] [--data-parallel-only]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "common/base/aligned.h"
#include "common/data/job_spec.h"
#include "common/engine/compute_threads.h"
#include "common/engine/nn/data_parallel_model.h"
#include "common/engine/nn/gemm.h"
#include "common/engine/nn/gradient_scaling.h"
#include "common/engine/nn/onednn_conv.h"
#include "common/engine/nn/onednn_matmul.h"
#include "common/base/rng.h"
#include "common/engine/optim/optimizer.h"
#include "common/engine/simd/bf16_product.h"
#include "common/engine/simd/kernels.h"
#include "common/engine/simd/segmented_product.h"

namespace pstrain {
namespace {

using Clock = std::chrono::steady_clock;
using Buffer = std::vector<float, CacheAlignedAllocator<float>>;

// Median seconds per call of f over `repeats` timings of at least min_ms each.
double time_it(const std::function<void()>& f, int repeats, double min_ms) {
  f();
  const auto once_start = Clock::now();
  f();
  const double once = std::chrono::duration<double>(Clock::now() - once_start).count();
  const int64_t iterations = std::max<int64_t>(1, static_cast<int64_t>(min_ms / 1e3 / std::max(once, 1e-9)));
  std::vector<double> t;
  for (int r = 0; r < repeats; ++r) {
    const auto start = Clock::now();
    for (int64_t i = 0; i < iterations; ++i) f();
    t.push_back(std::chrono::duration<double>(Clock::now() - start).count() / static_cast<double>(iterations));
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

// The median seconds of `a` and of `b` over `repeats` timings each, interleaved so that each
// runs first in every other repeat (the host's drift falls on both alike).
std::pair<double, double> interleaved_medians(const std::function<void()>& a, const std::function<void()>& b,
                                              int repeats, double min_ms) {
  std::vector<double> ta, tb;
  for (int r = 0; r < repeats; ++r) {
    if (r % 2 == 0) ta.push_back(time_it(a, 1, min_ms));
    tb.push_back(time_it(b, 1, min_ms));
    if (r % 2 == 1) ta.push_back(time_it(a, 1, min_ms));
  }
  std::sort(ta.begin(), ta.end());
  std::sort(tb.begin(), tb.end());
  return {ta[ta.size() / 2], tb[tb.size() / 2]};
}

Buffer random(size_t n, uint64_t seed) {
  Rng rng(seed);
  Buffer b(n);
  for (float& x : b) x = rng.uniform_float(-1.0f, 1.0f);
  return b;
}

// One dense layer product, as the engine calls it, in both implementations.
struct Case {
  const char* name;
  int64_t out, in, batch;
  enum Kind { kForward, kKernelGradient, kInputGradient } kind;
};

// A data-parallel step's kernel gradient (out x in over a batch split in `replicas` slices), both
// ways; prints milliseconds per step and the ratio.
void data_parallel_kernel_gradients(int replicas, int repeats, double min_ms) {
  struct Shape {
    const char* name;
    int64_t out, in, batch;
  };
  const Shape shapes[] = {
      {"Keras CNN dense 128 x 21632, batch 128", 128, 21632, 128},
      {"MNIST MLP dense 1 700 x 784, batch 128", 700, 784, 128},
      {"Fashion MLP dense 2 500 x 700, batch 128", 500, 700, 128},
      {"large MLP dense 2 5000 x 4096, batch 128", 5000, 4096, 128},
      {"TPU CNN dense 256 x 6400, batch 200", 256, 6400, 200},
  };
  std::printf("\nkernel gradients of a data-parallel step on %d threads (ms per step)\n", replicas);
  std::printf("%-44s %12s %12s %7s\n", "layer (out x in, batch)", "slices+sum", "segmented", "ratio");
  for (const Shape& c : shapes) {
    const Buffer x = random(static_cast<size_t>(c.in * c.batch), 2), dy = random(static_cast<size_t>(c.out * c.batch), 3);
    const size_t size = static_cast<size_t>(c.out * c.in);
    std::vector<Buffer> buffers(static_cast<size_t>(replicas), Buffer(size));
    std::vector<simd::ProductSegment> segments;
    std::vector<int64_t> first;
    for (int r = 0; r <= replicas; ++r) first.push_back(c.batch * r / replicas);
    for (int r = 0; r < replicas; ++r) {
      segments.push_back({{dy.data() + first[r] * c.out, 1, c.out}, {x.data() + first[r] * c.in, 1, c.in},
                          first[r + 1] - first[r]});
    }
    const std::function<void()> sliced = [&] {
#pragma omp parallel for num_threads(replicas) schedule(static, 1)
      for (int r = 0; r < replicas; ++r) {
        const simd::ProductSegment& s = segments[static_cast<size_t>(r)];
        simd::product(c.out, c.in, s.k, s.a, s.b, false, buffers[static_cast<size_t>(r)].data(), c.out);
      }
      const auto n = static_cast<int64_t>(size);
#pragma omp parallel for num_threads(replicas) schedule(static)
      for (int64_t i = 0; i < n; ++i) {
        float sum = buffers[0][static_cast<size_t>(i)];
        for (int r = 1; r < replicas; ++r) sum += buffers[static_cast<size_t>(r)][static_cast<size_t>(i)];
        buffers[0][static_cast<size_t>(i)] = sum;
      }
    };
    const std::function<void()> joint = [&] {
      simd::product_segments(c.out, c.in, segments, buffers[0].data(), c.out, replicas);
    };
    const auto [ta, tb] = interleaved_medians(sliced, joint, repeats, min_ms);
    std::printf("%-44s %12.3f %12.3f %7.2f\n", c.name, ta * 1e3, tb * 1e3, ta / tb);
    std::fflush(stdout);
  }
}

// Whole data-parallel steps (forward and backward) of a few models on `replicas` threads, with the
// kernels multiplied together and with each replica's products summed, alternating step by step.
void data_parallel_steps(int replicas, int repeats, double min_ms) {
  struct Job {
    const char* name;
    const char* spec;
    int64_t batch;
  };
  const Job jobs[] = {
      {"Keras CNN conv32-d128-d10, batch 128",
       R"({"input_shape": [28, 28, 1], "seed": 1, "layers": [{"type": "conv2d", "filters": 32, "kernel_size": 3,
           "activation": "relu"}, {"type": "flatten"}, {"type": "dense", "units": 128, "activation": "relu"},
           {"type": "dense", "units": 10}]})",
       128},
      {"MLP 784-700-500-10, batch 128",
       R"({"input_shape": [784], "seed": 1, "layers": [{"type": "dense", "units": 700, "activation": "relu"},
           {"type": "dense", "units": 500, "activation": "relu"}, {"type": "dense", "units": 10}]})",
       128},
      // The control: no kernel multiplied together (the first layer reads the input, the others
      // are below the size), so both ways run the same code and the ratio shows the noise.
      {"MLP 784-500-500-10 (control: same code)",
       R"({"input_shape": [784], "seed": 1, "layers": [{"type": "dense", "units": 500, "activation": "relu"},
           {"type": "dense", "units": 500, "activation": "relu"}, {"type": "dense", "units": 10}]})",
       128},
      {"MLP 784-2048-2048-10, batch 128",
       R"({"input_shape": [784], "seed": 1, "layers": [{"type": "dense", "units": 2048, "activation": "relu"},
           {"type": "dense", "units": 2048, "activation": "relu"}, {"type": "dense", "units": 10}]})",
       128},
  };
  std::printf("\ndata-parallel steps on %d threads, forward and backward (ms per step)\n", replicas);
  std::printf("%-44s %8s %12s %12s %7s\n", "model", "kernels", "slices+sum", "together", "ratio");
  for (const Job& job : jobs) {
    nn::DataParallelModel<float> model(parse_model_spec(job.spec), job.batch, replicas);
    const Buffer params = random(model.layout().total_size(), 1);
    Buffer inputs = random(static_cast<size_t>(model.input_size() * job.batch), 2), grads(params.size());
    for (float& v : inputs) v = v < 0 ? 0.0f : v;
    std::vector<int32_t> labels(static_cast<size_t>(job.batch));
    for (size_t i = 0; i < labels.size(); ++i) labels[i] = static_cast<int32_t>(i % 10);
    const auto step = [&](bool together) {
      return [&, together] {
        model.multiply_kernels_together(together);
        model.compute_gradients(params.data(), inputs.data(), labels.data(), job.batch, grads.data());
      };
    };
    const auto [ta, tb] = interleaved_medians(step(false), step(true), repeats, min_ms);
    std::printf("%-44s %8zu %12.3f %12.3f %7.2f\n", job.name, model.kernels_together(), ta * 1e3, tb * 1e3, ta / tb);
    std::fflush(stdout);
  }
}

// Whole trainer steps (data-parallel forward and backward, then the update) of a few models with
// Adam on `replicas` threads, the step's tail two ways with the same bits: the replicas' sum
// inside compute_gradients, the scaling on one thread, then the update (as before); against the
// sum and the scaling block by block inside the update (optim::Optimizer::Prologue, as
// worker/local_trainer.cc runs it); alternating, as ratios.
void data_parallel_tails(int replicas, int repeats, double min_ms) {
  struct Job {
    const char* name;
    const char* spec;
  };
  const Job jobs[] = {
      {"MLP 784-700-500-10, batch 128",
       R"({"input_shape": [784], "seed": 1, "layers": [{"type": "dense", "units": 700, "activation": "relu"},
           {"type": "dense", "units": 500, "activation": "relu"}, {"type": "dense", "units": 10}]})"},
      {"Keras CNN conv32-d128-d10, batch 128",
       R"({"input_shape": [28, 28, 1], "seed": 1, "layers": [{"type": "conv2d", "filters": 32, "kernel_size": 3,
           "activation": "relu"}, {"type": "flatten"}, {"type": "dense", "units": 128, "activation": "relu"},
           {"type": "dense", "units": 10}]})"},
      {"MLP 784-2048-2048-10, batch 128",
       R"({"input_shape": [784], "seed": 1, "layers": [{"type": "dense", "units": 2048, "activation": "relu"},
           {"type": "dense", "units": 2048, "activation": "relu"}, {"type": "dense", "units": 10}]})"},
  };
  const int64_t batch = 128;
  set_compute_threads(replicas);  // the update runs on every thread, as in the trainer
  std::printf("\ntrainer steps with Adam on %d threads: the tail in separate passes, and in the update (ms per step)\n",
              replicas);
  std::printf("%-44s %12s %12s %7s\n", "model", "separate", "in update", "ratio");
  const auto optimizer = optim::make_optimizer(OptimizerSpec{});
  for (const Job& job : jobs) {
    nn::DataParallelModel<float> model(parse_model_spec(job.spec), batch, replicas);
    const ParamLayout& layout = model.layout();
    Buffer params = random(layout.total_size(), 1);
    for (float& v : params) v *= 0.05f;
    Buffer inputs = random(static_cast<size_t>(model.input_size() * batch), 2), grads(params.size());
    for (float& v : inputs) v = v < 0 ? 0.0f : v;
    std::vector<int32_t> labels(static_cast<size_t>(batch));
    for (size_t i = 0; i < labels.size(); ++i) labels[i] = static_cast<int32_t>(i % 10);
    optim::OptimizerState state = optimizer->make_state(params.size());
    const std::span<float> w(params.data(), params.size());
    const std::span<const float> g(grads.data(), grads.size());
    const auto separate = [&] {
      model.leave_sum_to_caller(false);
      model.compute_gradients(params.data(), inputs.data(), labels.data(), batch, grads.data());
      nn::scale_and_regularize(layout, grads.data(), params.data(), batch);
      optimizer->apply(w, g, state, w, 1.0f);
    };
    const auto fused = [&] {
      model.leave_sum_to_caller(true);
      model.compute_gradients(params.data(), inputs.data(), labels.data(), batch, grads.data());
      optimizer->apply(w, g, state, w, 1.0f, [&](int64_t b, int64_t e) {
        model.sum_into(grads.data(), static_cast<size_t>(b), static_cast<size_t>(e));
        nn::scale_and_regularize(layout, grads.data(), params.data(), batch, static_cast<size_t>(b),
                                 static_cast<size_t>(e));
      });
    };
    const auto [ta, tb] = interleaved_medians(separate, fused, repeats, min_ms);
    std::printf("%-44s %12.3f %12.3f %7.2f\n", job.name, ta * 1e3, tb * 1e3, ta / tb);
    std::fflush(stdout);
  }
  set_compute_threads(1);
}

int run(int argc, char** argv) {
  int repeats = 5;
  int replicas = 2;
  double min_ms = 100;
  bool products = true;
  for (int i = 1; i < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--data-parallel-only") {
      products = false;
      --i;
    } else if (i + 1 >= argc) {
      std::fprintf(stderr, "%s needs a value\n", a.c_str());
      return 2;
    } else if (a == "--repeats") {
      repeats = std::max(1, std::atoi(argv[i + 1]));
    } else if (a == "--min-ms") {
      min_ms = std::atof(argv[i + 1]);
    } else if (a == "--replicas") {
      replicas = std::max(2, std::atoi(argv[i + 1]));
    } else {
      std::fprintf(stderr, "usage: pstrain-kernel-bench [--repeats N] [--min-ms MS] [--replicas R] [--data-parallel-only]\n");
      return 2;
    }
  }
  set_compute_threads(1);
  std::printf("CPU: %s\n", describe_compute().c_str());
  const bool onednn = nn::onednn_preferred();
  std::printf("oneDNN: %s\n", nn::onednn_isa());
  std::printf("%-44s %10s %10s %10s %10s %7s %7s %7s\n", "product (out x in, batch)", "ours GF/s", "BLAS GF/s",
              "oneDNN", "ours bf16", "ours/B", "oneDNN/B", "bf16/us");
  const Case cases[] = {
      {"MNIST MLP dense 1 forward (700 x 784, 64)", 700, 784, 64, Case::kForward},
      {"MNIST MLP dense 1 kernel gradient", 700, 784, 64, Case::kKernelGradient},
      {"MNIST MLP dense 2 forward (500 x 700, 64)", 500, 700, 64, Case::kForward},
      {"MNIST MLP dense 2 kernel gradient", 500, 700, 64, Case::kKernelGradient},
      {"MNIST MLP dense 2 input gradient", 500, 700, 64, Case::kInputGradient},
      {"dense 128 x 784, batch 128 forward", 128, 784, 128, Case::kForward},
      {"dense 128 x 784, batch 128 kernel gradient", 128, 784, 128, Case::kKernelGradient},
      {"CNN dense 64 x 1600, batch 64 forward", 64, 1600, 64, Case::kForward},
      {"CNN dense 64 x 1600, batch 64 input gradient", 64, 1600, 64, Case::kInputGradient},
      {"Keras CNN dense 128 x 21632, batch 64 forward", 128, 21632, 64, Case::kForward},
      {"Keras CNN dense 128 x 21632, batch 64 kernel gr", 128, 21632, 64, Case::kKernelGradient},
      {"Keras CNN dense 128 x 21632, batch 128 forward", 128, 21632, 128, Case::kForward},
      {"Keras CNN dense 128 x 21632, batch 128 kernel g", 128, 21632, 128, Case::kKernelGradient},
      {"Keras CNN dense 128 x 21632, batch 128 input gr", 128, 21632, 128, Case::kInputGradient},
      {"large MLP 2048 x 2048, batch 128 forward", 2048, 2048, 128, Case::kForward},
      {"large MLP 2048 x 2048, batch 128 kernel grad", 2048, 2048, 128, Case::kKernelGradient},
      {"large MLP 2048 x 2048, batch 128 input grad", 2048, 2048, 128, Case::kInputGradient},
  };
  for (const Case& c : cases) {
    if (!products) break;
    const Buffer w = random(static_cast<size_t>(c.in * c.out), 1), x = random(static_cast<size_t>(c.in * c.batch), 2),
                 dy = random(static_cast<size_t>(c.out * c.batch), 3);
    Buffer result(static_cast<size_t>(std::max(c.in, c.out) * std::max(c.in, c.batch)));
    const Buffer bias(static_cast<size_t>(c.out), 0.0f);
    std::function<void()> ours, blas, dnn, low;
    std::unique_ptr<nn::OneDnnMatmul> matmul;
    if (onednn && c.kind != Case::kKernelGradient) matmul = std::make_unique<nn::OneDnnMatmul>(c.in, c.out, false, false);
    switch (c.kind) {
      case Case::kForward:  // y (out x batch) = W^T x
        ours = [&] { simd::product(c.out, c.batch, c.in, {w.data(), 1, c.out}, {x.data(), c.in, 1}, false, result.data(), c.out); };
        blas = [&] {
          nn::gemm<float>(nn::Op::kNone, nn::Op::kNone, c.out, c.batch, c.in, w.data(), c.out, x.data(), c.in, 0.0f,
                          result.data(), c.out);
        };
        if (matmul) dnn = [&] { matmul->forward(w.data(), bias.data(), x.data(), c.batch, result.data()); };
        break;
      case Case::kKernelGradient:  // dW (out x in) = dy x^T
        ours = [&] { simd::product(c.out, c.in, c.batch, {dy.data(), 1, c.out}, {x.data(), 1, c.in}, false, result.data(), c.out); };
        blas = [&] {
          nn::gemm<float>(nn::Op::kNone, nn::Op::kTranspose, c.out, c.in, c.batch, dy.data(), c.out, x.data(), c.in,
                          0.0f, result.data(), c.out);
        };
        if (simd::bf16_product_native()) {
          low = [&] {
            simd::product_bf16(c.out, c.in, c.batch, {dy.data(), 1, c.out}, {x.data(), 1, c.in}, false, result.data(),
                               c.out);
          };
        }
        break;
      case Case::kInputGradient:  // dx (in x batch) = W dy
        ours = [&] { simd::product(c.in, c.batch, c.out, {w.data(), c.out, 1}, {dy.data(), c.out, 1}, false, result.data(), c.in); };
        blas = [&] {
          nn::gemm<float>(nn::Op::kTranspose, nn::Op::kNone, c.in, c.batch, c.out, w.data(), c.out, dy.data(), c.out,
                          0.0f, result.data(), c.in);
        };
        if (matmul) dnn = [&] { matmul->backward_data(w.data(), dy.data(), c.batch, result.data()); };
        break;
    }
    std::vector<double> mine, theirs, dnns, lows;
    for (int r = 0; r < repeats; ++r) {  // interleaved
      mine.push_back(time_it(ours, 1, min_ms));
      theirs.push_back(time_it(blas, 1, min_ms));
      if (dnn) dnns.push_back(time_it(dnn, 1, min_ms));
      if (low) lows.push_back(time_it(low, 1, min_ms));
    }
    const double flops = 2.0 * static_cast<double>(c.in * c.out * c.batch);
    const auto rate = [&](std::vector<double>& t) {
      std::sort(t.begin(), t.end());
      return flops / t[t.size() / 2] / 1e9;
    };
    const double a = rate(mine), b = rate(theirs);
    const auto column = [](double v, const char* format) {
      char text[32];
      std::snprintf(text, sizeof text, format, v);
      return std::string(v > 0 ? text : "-");
    };
    const double d = dnns.empty() ? 0.0 : rate(dnns), l = lows.empty() ? 0.0 : rate(lows);
    std::printf("%-44s %10.1f %10.1f %10s %10s %7.2f %7s %7s\n", c.name, a, b, column(d, "%.1f").c_str(),
                column(l, "%.1f").c_str(), a / b, column(d / b, "%.2f").c_str(), column(l / a, "%.2f").c_str());
    std::fflush(stdout);
  }
  data_parallel_kernel_gradients(replicas, repeats, min_ms);
  data_parallel_steps(replicas, repeats, min_ms);
  data_parallel_tails(replicas, repeats, min_ms);
  return 0;
}

}  // namespace
}  // namespace pstrain

int main(int argc, char** argv) { return pstrain::run(argc, argv); }
