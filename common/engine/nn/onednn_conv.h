// A float convolution through oneDNN (Debian's libdnnl, the library PyTorch and TensorFlow use for
// CPU convolutions): Conv2D<float>'s default method (common/engine/nn/layers.h).
//
// Why oneDNN: it generates each convolution's code at run time for the CPU at hand (SSE4.1, AVX2,
// AVX-512), so a portable binary runs every layer at the CPU's full width. Measured against our
// own direct kernel and im2col on 15 layers (tests/bench/conv_bench.cc, docs/BENCHMARKS.md): faster
// on every layer and every level (docs/DESIGN-NOTES.md, "Convolution").
//
// Exactness: a primitive is planned and run on the calling thread only (the caller's OpenMP
// thread count is set to 1 around every oneDNN call): with more threads oneDNN splits the kernel
// gradient's sum over threads, so its value would depend on the thread count. Parallelism comes
// from the batch replicas of DataParallelModel, as for every other layer. For a given level, shape
// and batch, results are then the same on every run, and an example's output and input gradient
// do not depend on its position in the batch or on the batch's size (checked by
// tests/common/conv2d_methods_test.cc).
//
// Layouts are ours, unchanged: inputs and outputs NHWC (a column per example, [h, w, c]), the
// kernel TensorFlow's [kh, kw, cin, cout]. The kernel is reordered into the layout the primitive
// prefers at every forward (it changes every step) and the kernel gradient back.
//
// Mixed precision (bf16 = true; issue 53): the products in bfloat16 where the CPU computes them
// natively (onednn_bf16(): AVX512-BF16 or AMX). The input, the output gradient and the kernel are
// rounded to bfloat16 as they are reordered for the primitive (round to nearest even); the
// products accumulate in float32 and the output, the kernel, bias and input gradients are
// float32. The kernel stays float32 in the caller's memory (the master weights). The input is
// rounded once per forward and its copy serves that forward's backward (the layer contract: a
// backward sees its forward's input), the output gradient once per backward (the kernel
// gradient rounds it, the input gradient right after reuses it); a different pointer rounds
// afresh. Exactness is as for float: for a given level, shape and batch the same bits on every
// run.
//
// Thread rules: one thread at a time per object (each replica has its own layers).
#pragma once

#include <cstdint>
#include <memory>

namespace pstrain::nn {

struct ConvGeometry {
  int64_t height, width, channels;  // input
  int64_t kernel_h, kernel_w, filters;
  int64_t stride_h = 1, stride_w = 1;
  int64_t pad_top = 0, pad_left = 0;  // padding before; the padding after is implied by out_h/out_w
  int64_t out_h = 0, out_w = 0;
  int64_t dilation_h = 1, dilation_w = 1;  // the kernel reads every d-th input (im2col only)
  int64_t patch_size() const { return kernel_h * kernel_w * channels; }
  bool dilated() const { return dilation_h > 1 || dilation_w > 1; }
  bool dense_windows() const {  // stride 1, no padding, no dilation
    return stride_h == 1 && stride_w == 1 && pad_top == 0 && pad_left == 0 && !dilated() &&
           out_h == height - kernel_h + 1 && out_w == width - kernel_w + 1;
  }
};

// Whether this build has oneDNN (PSTRAIN_ONEDNN; not in ThreadSanitizer builds).
bool onednn_available();
// Whether oneDNN generates direct convolution code here: on AVX2 and up. Below (SSE4.1) it falls
// back to products of its own that are slower than our im2col on first layers (measured:
// docs/BENCHMARKS.md), so Conv2D uses im2col there.
bool onednn_preferred();
// The instruction set oneDNN generates code for here ("avx512_core", "avx2", ...), for logs.
const char* onednn_isa();
// Whether oneDNN computes bfloat16 products natively here (avx512_core_bf16 or AMX, and not capped
// below by PSTRAIN_CPU_TARGET / ONEDNN_MAX_CPU_ISA): where mixed precision runs in bfloat16.
bool onednn_bf16();

class OneDnnConv {
 public:
  // bf16: products in bfloat16 (above); throws Error where !onednn_bf16().
  OneDnnConv(const ConvGeometry& g, bool relu, bool bf16 = false);
  ~OneDnnConv();
  OneDnnConv(const OneDnnConv&) = delete;
  OneDnnConv& operator=(const OneDnnConv&) = delete;

  // y = conv(x, kernel) + bias, then ReLU when asked. x: batch examples of [h, w, c]; y: batch of
  // [out_h, out_w, filters].
  void forward(const float* kernel, const float* bias, const float* x, int64_t batch, float* y);
  // The kernel and bias gradients (overwritten) from x and dy (already masked by ReLU).
  void backward_weights(const float* x, const float* dy, int64_t batch, float* dkernel, float* dbias);
  // The input gradient (overwritten).
  void backward_data(const float* kernel, const float* dy, int64_t batch, float* dx);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace pstrain::nn
