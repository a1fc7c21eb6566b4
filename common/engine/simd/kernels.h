// Hand-vectorized kernels, built for several instruction-set levels in one binary and picked at
// run time (common/engine/simd/cpu_target.h). Each level's code is the same source
// (kernels_target.inc) compiled with that level's -march flag into a table of function pointers;
// kernels() returns the active level's table.
//
// What goes here: loops whose speed depends on the vector width and that the portable build
// would otherwise run at SSE2 (the optimizers' updates, the dense layer's element-wise backward),
// and the products whose order of additions must not depend on the CPU or on how the work is
// tiled.
//
// product: C = A * B^T (or C += A * B^T), where every element is summed over k in ascending order,
// from +0 (or from C's value), by one multiply-add per term (a fused multiply-add where the level
// has FMA: x86-64-v3, x86-64-v4 and other architectures; a multiply then an add on x86-64). Its
// value is a function of that element's row of A and row of B only: not of m, n, the element's
// position, the operands' strides or alignment, or the level (among levels with FMA). A zero term
// adds exactly nothing, so a sum over the nonzero terms only (a sparse input's active features)
// has the same bits as the sum over all. Float32 dense kernel gradients use it wherever they are
// computed (a worker's backward, the standalone trainer, a server multiplying out only its rows of
// a factored push; mixed precision's use bf16_product.h, which has the same property), so those
// paths agree bit for bit on every CPU, where a BLAS product rounds an
// element differently depending on where the element falls in its tiling (docs/DESIGN-NOTES.md,
// "Exactness on every CPU").
//
// Element-wise kernels give each element a value that does not depend on where the range starts
// or ends (the vector body and the remainder do the same operations), so a range may be split over
// threads or shards freely. tests/common/engine/simd_kernels_test.cc checks both properties and
// every kernel against a scalar reference, on each level the machine runs.
//
// Thread rules: the tables are immutable; kernels write only their outputs (and the scratch they
// are given), so distinct outputs may be computed on distinct threads.
#pragma once

#include <cstddef>
#include <cstdint>

#include "common/engine/simd/cpu_target.h"

namespace pstrain::simd {

// A convolution with one input channel, on one example (KernelTable::one_channel_conv): the
// example's image already padded, ph = (oh - 1) * sh + kh rows of pw = (ow - 1) * sw + kw values
// (zeros where the convolution's padding is), and readable kOneChannelSlack * sw values past its
// end; kernel [kh * kw taps, filters] (Keras' [kh, kw, 1, filters]); outputs [oh * ow, filters].
struct OneChannelGeometry {
  int64_t pw, kh, kw, sh, sw, oh, ow, filters;
};
constexpr int64_t kOneChannelMaxTaps = 64;  // kh * kw at most (Conv2D's direct method)
constexpr int64_t kOneChannelSlack = 4;

struct KernelTable {
  CpuTarget target;
  bool fma;  // multiply-adds are fused

  int64_t nr;  // product's columns per tile (splits of n at multiples of it keep tiles whole)

  // C (m x n, column-major, leading dimension ldc) = A * B^T, or C + A * B^T when accumulate,
  // where A(i, p) = a[i * a_row + p * a_k] (m x k) and B(j, p) = b[j * b_row + p * b_k] (n x k).
  // `scratch` holds product_scratch(m, n, k) floats.
  void (*product)(int64_t m, int64_t n, int64_t k, const float* a, int64_t a_row, int64_t a_k, const float* b,
                  int64_t b_row, int64_t b_k, bool accumulate, float* c, int64_t ldc, float* scratch);
  size_t (*product_scratch)(int64_t m, int64_t n, int64_t k);

  // The optimizers' updates over n parameters (common/engine/optim/optimizer.h has the formulas);
  // out may be w.
  void (*sgd)(int64_t n, const float* w, const float* g, float* out, float lr);
  void (*momentum)(int64_t n, const float* w, const float* g, float* m, float* out, float lr, float momentum,
                   bool nesterov);
  void (*adam)(int64_t n, const float* w, const float* g, float* m, float* v, float* out, float alpha,
               float one_minus_b1, float one_minus_b2, float eps);
  void (*adagrad)(int64_t n, const float* w, const float* g, float* acc, float* out, float lr, float eps);

  // Dense backward's element-wise part, on an (rows x cols) column-major block: where y <= 0,
  // d = 0 (the ReLU mask; d may alias nothing else), and sums[r] = the sum of row r of d over the
  // columns in order, from +0.
  void (*relu_mask)(int64_t n, const float* y, float* d);
  void (*row_sums)(int64_t rows, int64_t cols, const float* d, float* sums);

  // One example's max pooling over [h, w, c]: oh x ow windows of pool_h x pool_w every
  // stride_h / stride_w; out and argmax (the window's largest value's offset in the example,
  // the first on ties, as TensorFlow) are [oh, ow, c].
  void (*max_pool)(const float* image, int64_t w, int64_t c, int64_t pool_h, int64_t pool_w, int64_t stride_h,
                   int64_t stride_w, int64_t oh, int64_t ow, float* out, int32_t* argmax);

  // Batch normalization (common/engine/nn/batch_norm.h) over `rows` rows of c channels, row r's
  // channel k at x[r * c + k], vectorized along the channels; every per-channel sum adds the rows
  // in order onto what the array holds.
  //   channel_sums         sums[k] += x(r, k)
  //   channel_square_sums  sums[k] += (x(r, k) - mean[k])^2
  //   normalize            y = (x - mean) * rstd * gamma + beta, then, when relu, the ReLU
  //                        (y > 0 ? y : 0, as the activation layer) fused into the same pass
  // Backward, with g = dy, or 0 where y <= 0 when the forward's output y is given (the fused
  // ReLU's mask; nullptr: none), xhat = (x - mean) * rstd and dxhat = g * gamma:
  //   normalize_backward_sums  dgamma += g * xhat, dbeta += g, sum_dxhat += dxhat,
  //                            sum_dxhat_xhat += dxhat * xhat
  //   normalize_backward       dx = rstd * (dxhat - mean_dxhat - xhat * mean_dxhat_xhat)
  void (*channel_sums)(int64_t rows, int64_t c, const float* x, float* sums);
  void (*channel_square_sums)(int64_t rows, int64_t c, const float* x, const float* mean, float* sums);
  void (*normalize)(int64_t rows, int64_t c, const float* x, const float* mean, const float* rstd,
                    const float* gamma, const float* beta, bool relu, float* y);
  void (*normalize_backward_sums)(int64_t rows, int64_t c, const float* x, const float* dy, const float* y,
                                  const float* mean, const float* rstd, const float* gamma, float* dgamma,
                                  float* dbeta, float* sum_dxhat, float* sum_dxhat_xhat);
  void (*normalize_backward)(int64_t rows, int64_t c, const float* x, const float* dy, const float* y,
                             const float* mean, const float* rstd, const float* gamma, const float* mean_dxhat,
                             const float* mean_dxhat_xhat, float* dx);

  // The ReLU's passes (the activation layer's and a fused add's), branch-free at the level's
  // width: y = x > 0 ? x : 0 (0 for NaN); d = y > 0 ? g : 0 (d may be g); out = relu(a + b).
  void (*relu)(int64_t n, const float* x, float* y);
  void (*relu_select)(int64_t n, const float* y, const float* g, float* d);
  void (*add_relu)(int64_t n, const float* a, const float* b, float* out);

  // The fp16 codec's conversions (common/engine/compression.h): IEEE binary16, round to nearest
  // even, 2 bytes a value, little-endian at any alignment. The CPU's (F16C) where the level has
  // it (x86-64-v3 and up), else the scalar float_to_half / half_to_float: the same halves on
  // every level (a NaN's payload aside).
  void (*floats_to_halves)(int64_t n, const float* in, unsigned char* out);
  void (*halves_to_floats)(int64_t n, const unsigned char* in, float* out);

  // Mixed precision's rounded kernels on the wire (a server's bfloat16 replies, docs/DESIGN-NOTES.md
  // "bfloat16 replies"): float32 to bfloat16 exactly as bf16_round (bf16_product.h) rounds - to
  // nearest even, a denormal to a zero of its sign, a NaN quiet - and back (exact). 2 bytes a
  // value, little-endian at any alignment; the same bits on every level.
  void (*floats_to_bf16)(int64_t n, const float* in, unsigned char* out);
  void (*bf16_to_floats)(int64_t n, const unsigned char* in, float* out);

  // Attention's softmax over one query's n scores s (common/engine/nn/attention.h), in place:
  // t_j = s_j * scale; top = the largest t_j where allowed[j] != 0; e_j = exp(t_j - top) there,
  // 0 elsewhere; s_j = e_j / sum, sum the e_j added in 16 lanes (lane l the j = l mod 16 in
  // ascending order, from +0) and then the lanes in order; all zero when nothing is allowed. exp is
  // the kernels' own (Cephes' polynomial; about 2 units in the last place; 0 below -87.33), so a
  // value is the same on every level with FMA, as product's are.
  // softmax_backward, from the weights w and their gradient g (in place): dot = the sum of
  // w_j g_j (the same lanes), g_j = w_j (g_j - dot) scale.
  void (*masked_softmax)(int64_t n, float scale, const float* allowed, float* s);
  void (*softmax_backward)(int64_t n, float scale, const float* w, float* g);

  // The one-channel convolution (OneChannelGeometry above; Conv2D's direct method, conv2d.cc).
  //   one_channel_conv: out(y, x, f) = bias[f] + (the sum over taps (ky, kx) in that order, from
  //     +0, of kernel(ky, kx, f) * image(y * sh + ky, x * sw + kx), a multiply-add each), then the
  //     ReLU (v > 0 ? v : 0) when relu.
  //   one_channel_conv_gradient: with g = dy, or 0 where y <= 0 when the forward's output y is
  //     given (the ReLU's mask; nullptr: none), adds to dw(ky, kx, f) the sum over positions in
  //     order, from +0, of g(y, x, f) * image(y * sh + ky, x * sw + kx), and to db[f] the sum of
  //     g(y, x, f) over positions in order, from +0.
  // So each value is a function of the example and the filter's own kernel column: not of the
  // filter count, the batch, or the level (among levels with FMA), as product's are.
  void (*one_channel_conv)(const float* image, const OneChannelGeometry& g, const float* kernel, const float* bias,
                           bool relu, float* out);
  void (*one_channel_conv_gradient)(const float* image, const OneChannelGeometry& g, const float* y,
                                    const float* dy, float* dw, float* db);
};

// The active level's table (selected once).
const KernelTable& kernels();
// The table for level t, or nullptr when this binary has none for it or the CPU cannot run it.
const KernelTable* kernels_for(CpuTarget t);

// An operand of product(): entry (i, p) at data[i * row + p * step].
struct Operand {
  const float* data;
  int64_t row, step;
};

// kernels().product with scratch of the calling thread's own, its columns split over the OpenMP
// threads when `threads` > 1 and the product is large enough (each element's value is the same
// either way).
void product(int64_t m, int64_t n, int64_t k, Operand a, Operand b, bool accumulate, float* c, int64_t ldc,
             int threads = 1);

}  // namespace pstrain::simd
