// General matrix product on column-major buffers: C = op(A) * op(B) + beta * C.
//
// Routed to OpenBLAS's cblas_sgemm/dgemm when the build links it (PSTRAIN_BLAS=openblas, the
// faster choice on the machines we measured: docs/BENCHMARKS.md), else to Eigen. Calling BLAS
// directly, rather than through Eigen's EIGEN_USE_BLAS, lets beta = 1 fold the bias into the
// product and avoids Eigen zeroing the destination before every product.
#pragma once

#include <cstdint>

namespace pstrain::nn {

enum class Op { kNone, kTranspose };

// op(A) is m x k, op(B) is k x n, C is m x n; lda/ldb/ldc are the leading dimensions of the
// stored (untransposed) matrices. beta is 0 (overwrite C) or 1 (accumulate into C).
template <typename T>
void gemm(Op op_a, Op op_b, int64_t m, int64_t n, int64_t k, const T* a, int64_t lda, const T* b, int64_t ldb,
          T beta, T* c, int64_t ldc);

}  // namespace pstrain::nn
