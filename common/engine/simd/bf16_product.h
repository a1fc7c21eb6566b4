// The bfloat16 product of mixed precision's dense kernel gradients (docs/DESIGN-NOTES.md, "bfloat16
// dense layers"): C = A * B^T, or C + A * B^T, on A and B rounded to bfloat16, accumulated in
// float32, with one order of additions per element that does not depend on the CPU or the tiling.
//
// The contract. Operands are rounded by bf16_round (to nearest even; a float32 denormal becomes a
// zero of its sign; a NaN stays a quiet NaN). Element (i, j) starts from +0 (or from C's value,
// a denormal read as a zero of its sign) and takes k's terms in pairs, q = 0, 1, ..., the last
// pair of an odd k completed by a zero term:
//   c = ftz(fma(a(i, 2q + 1), b(j, 2q + 1), c));  c = ftz(fma(a(i, 2q), b(j, 2q), c));
// where ftz makes a zero of its sign of a sum that, rounded to float32's 24 bits with an unbounded
// exponent, is below float32's smallest normal (tininess before rounding, as x86 decides it: a sum
// just below 2^-126 that would round up to it in the denormal range is still 0). That is AVX512-BF16's
// VDPBF16PS applied to the pairs (the odd term first, each product exact and added with one
// rounding, denormals flushed), which runs it where the CPU has that instruction; elsewhere the
// same chain runs as scalar fused multiply-adds (tests/common/engine/bf16_product_test.cc checks
// the two bit for bit, on random operands across float32's whole range, and both against the
// contract written out term by term).
//
// So an element's value is a function of its row of A and its row of B only: not of m, n, its
// position, the operands' strides or alignment, the thread split, the CPU, or the path. A zero
// term adds nothing (apart from making a -0 sum +0, which the contract fixes too), so a server
// multiplying out only its rows of a factored push, or a sparse input's active rows, gets the
// bits of a worker's whole product, as with simd::product (kernels.h), whose role this takes when
// a dense layer runs in mixed precision (Dense::use_bf16).
//
// Speed: the native path does two multiply-adds per float32 lane and instruction, twice
// simd::product's rate; the emulated one is scalar (a server without AVX512-BF16 multiplying out a
// mixed-precision worker's factors; workers and the trainer run mixed precision only where
// oneDNN has bfloat16, which implies the instruction).
//
// Thread rules: stateless; each call writes only C (and the calling threads' own scratch).
#pragma once

#include <cstdint>

#include "common/engine/simd/kernels.h"

namespace pstrain::simd {

// float32 to bfloat16 as the contract above rounds it.
uint16_t bf16_round(float value);

// Whether product_bf16 runs VDPBF16PS here: the CPU has AVX512-BF16 and the active level
// (cpu_target.h) is x86-64-v4, so that a run capped at a lower level never executes it.
bool bf16_product_native();

// C (m x n, column-major, leading dimension ldc) = A * B^T, or C + A * B^T when accumulate, by the
// contract above; A(i, p) = a.data[i * a.row + p * a.step] (m x k), B likewise (n x k). Columns
// split over `threads` OpenMP threads as simd::product splits them. `emulated`: the scalar path
// even where the native one runs (for tests and benchmarks).
void product_bf16(int64_t m, int64_t n, int64_t k, Operand a, Operand b, bool accumulate, float* c, int64_t ldc,
                  int threads = 1, bool emulated = false);

// An operand already rounded by bf16_round (bfloat16 bits), with adjacent rows: entry (i, p) at
// data[i + p * step]. A dense layer's input as its bfloat16 forward rounded it (onednn_matmul.h),
// which the kernel gradient then packs as it is: the same bits as from the float32 input (rounding
// twice is rounding once), from half the bytes and without rounding again.
struct RoundedRows {
  const uint16_t* data;
  int64_t step;
};
void product_bf16(int64_t m, int64_t n, int64_t k, Operand a, RoundedRows b, bool accumulate, float* c, int64_t ldc,
                  int threads = 1, bool emulated = false);

// Rounds a float32 matrix (k x n, row-major, row stride ld) by bf16_round into oneDNN's
// BA16a<B>b2a layout for B = block_columns (16, 32, 48 or 64): blocks of 32 rows by B columns,
// the column blocks outermost, each block 16 pairs of rows, each pair's B columns as interleaved
// pairs (row 2q in the low half) - what oneDNN's bfloat16 matmul reads its weights as. Rows and
// columns past k and n are zeros; dst holds round_up(k, 32) * round_up(n, B) values. The dense
// layers' forward rounds their kernel with it every step (onednn_matmul.cc): it is that layout's
// oneDNN reorder at the speed of a plain conversion. With `plain`, the same roundings also go there
// in the matrix's own order (k x n row-major, row stride n): the kernel a dense layer's input
// gradient reads, written by the forward's one pass over the float32 kernel.
void round_to_pair_blocks(const float* src, int64_t k, int64_t n, int64_t ld, int64_t block_columns, void* dst,
                          uint16_t* plain = nullptr);

}  // namespace pstrain::simd
