// A dense kernel's gradient over a data-parallel batch, computed once for all slices: the bits of
// one product per slice summed afterwards in slice order, without writing and re-reading a
// kernel-sized buffer per slice.
//
// Why: a process that splits its batch over R threads (nn::DataParallelModel) must give the bits
// of R workers, each multiplying out its own slice's kernel gradient, which a server then sums in
// worker order. Computing that as R whole products, one per thread, writes R kernel-sized buffers
// and reads them again for the sum; for a wide layer (the Keras CNN's 21,632 x 128 kernel, 11 MB)
// that traffic, not the multiply-adds, is what the second thread costs. Here the threads split C
// into blocks instead, and each block's segments are multiplied and summed while the block is in
// cache.
//
// Thread rules: stateless; each call writes only C (and the calling threads' own scratch), using
// up to `threads` OpenMP threads. Must not be called from inside an OpenMP parallel region that
// expects it to stay on one thread (pass threads = 1 there).
#pragma once

#include <cstdint>
#include <span>

#include "common/engine/simd/kernels.h"

namespace pstrain::simd {

// One slice's factors: A (m x k) and B (n x k) as product() reads them.
struct ProductSegment {
  Operand a, b;
  int64_t k;
};

// C (m x n, column-major, leading dimension ldc) = S_0 + S_1 + ... added in segment order, where
// S_s = A_s * B_s^T is summed over its own k by product() (or product_bf16() when `bf16`): every
// element has exactly the bits of computing each S_s into a buffer of its own and then summing the
// buffers element by element in segment order, for any thread count and any split of C.
// segments must not be empty.
void product_segments(int64_t m, int64_t n, std::span<const ProductSegment> segments, float* c, int64_t ldc,
                      int threads, bool bf16 = false);

}  // namespace pstrain::simd
