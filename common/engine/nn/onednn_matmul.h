// A dense layer's forward y = x W + b and input gradient dx = dy W^T through oneDNN's matmul, in
// float32 or in bfloat16. Dense<float> uses it in float32 where oneDNN generates AVX-512 code
// (onednn_matmul_preferred(): 1.4-2.2x OpenBLAS's Haswell kernels on the AVX-512 CPU; at AVX2
// 0.56-1.21x, so BLAS stays there: docs/BENCHMARKS.md), reading the caller's memory as it lies;
// and in bfloat16 under mixed_bfloat16 where the CPU computes bfloat16 products natively
// (onednn_bf16(): AVX512-BF16 or AMX) (layers.h).
//
// In bfloat16 the operands (x, dy and the kernel) are rounded to bfloat16 as they are reordered for
// the primitive (round to nearest even); the products accumulate in float32 and y and dx are
// float32. The kernel stays float32 in the caller's memory (the master weights) and is rounded
// afresh at every call (it changes every step), into one buffer per layout that every batch
// size's primitive shares: the forward's the primitive's own blocked layout (written by
// simd::round_to_pair_blocks where it is BA16a<B>b2a, else by oneDNN's reorder), the input
// gradient's the kernel's [in, out] as it lies (read transposed), so that rounding is a plain
// conversion (two copies a layer). Once a layer has computed an input gradient, its forward
// writes both copies in its one pass over the kernel (round_to_pair_blocks with `plain`, where
// the forward's layout is BA16a<B>b2a; with another layout each product reorders its own), and
// the input gradient of the same kernel takes the forward's copy: the kernel does not change
// between a forward and its backward (a step's parameters), and either way the bits are the
// rounding of that kernel. The kernel gradient is not here: Dense computes it with
// simd::product_bf16 (bf16_product.h), the order of additions a server multiplying out a factored
// push also has, so every exchange stays exact.
//
// Layouts are ours: x and y a column per example (row-major [batch, in] and [batch, out]), the
// kernel Keras' [in, out] row-major. Exactness as onednn_conv.h: one thread per call
// (onednn_one_thread.h), so for a given level, shape and batch the same bits on every run.
//
// Thread rules: one thread at a time per object (each replica has its own layers).
#pragma once

#include <cstdint>
#include <memory>

namespace pstrain::nn {

// Whether Dense<float> computes its forward and input gradient here (oneDNN at AVX-512 and up,
// after PSTRAIN_CPU_TARGET's cap; false in builds without oneDNN).
bool onednn_matmul_preferred();

class OneDnnMatmul {
 public:
  // in x out kernel; relu: max(y, 0) fused into the forward. bf16: the products in bfloat16
  // (throws Error where !onednn_bf16()), else in float32 on the caller's memory.
  OneDnnMatmul(int64_t in, int64_t out, bool relu, bool bf16);
  ~OneDnnMatmul();
  OneDnnMatmul(const OneDnnMatmul&) = delete;
  OneDnnMatmul& operator=(const OneDnnMatmul&) = delete;

  // y = x kernel + bias (then ReLU when asked), for `batch` examples.
  void forward(const float* kernel, const float* bias, const float* x, int64_t batch, float* y);
  // dx = dy kernel^T (overwritten).
  void backward_data(const float* kernel, const float* dy, int64_t batch, float* dx);
  // Whether the forward for `batch` (bfloat16) writes its rounded kernel with
  // simd::round_to_pair_blocks rather than oneDNN's reorder (the primitive chose BA16a<B>b2a).
  bool rounds_kernel_itself(int64_t batch);
  // In bfloat16: the input x of the last forward of `batch` examples as that forward rounded it
  // ([batch, in] row-major, bf16_round's bits) when that forward read `x`, else nullptr (float32,
  // another input, or no such forward). It holds until the next forward of that batch size: a
  // layer's backward reads it for the kernel gradient (Dense::backward), its forward's input
  // unchanged in between (layer.h).
  const uint16_t* rounded_input(int64_t batch, const float* x);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace pstrain::nn
