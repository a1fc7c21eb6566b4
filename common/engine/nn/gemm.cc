#include "common/engine/nn/gemm.h"

#include "common/engine/nn/matrix.h"

#ifdef PSTRAIN_WITH_OPENBLAS
// The CBLAS prototypes, declared here so the build does not depend on which cblas.h the system's
// alternatives point at. Enum values are CBLAS's: ColMajor 102, NoTrans 111, Trans 112.
extern "C" {
void cblas_sgemm(int order, int trans_a, int trans_b, int m, int n, int k, float alpha, const float* a, int lda,
                 const float* b, int ldb, float beta, float* c, int ldc);
void cblas_dgemm(int order, int trans_a, int trans_b, int m, int n, int k, double alpha, const double* a, int lda,
                 const double* b, int ldb, double beta, double* c, int ldc);
}
#endif

namespace pstrain::nn {
namespace {

#ifdef PSTRAIN_WITH_OPENBLAS
constexpr int kColMajor = 102;
int cblas_op(Op op) { return op == Op::kNone ? 111 : 112; }

void blas_gemm(Op oa, Op ob, int64_t m, int64_t n, int64_t k, const float* a, int64_t lda, const float* b,
               int64_t ldb, float beta, float* c, int64_t ldc) {
  cblas_sgemm(kColMajor, cblas_op(oa), cblas_op(ob), static_cast<int>(m), static_cast<int>(n), static_cast<int>(k),
              1.0f, a, static_cast<int>(lda), b, static_cast<int>(ldb), beta, c, static_cast<int>(ldc));
}
void blas_gemm(Op oa, Op ob, int64_t m, int64_t n, int64_t k, const double* a, int64_t lda, const double* b,
               int64_t ldb, double beta, double* c, int64_t ldc) {
  cblas_dgemm(kColMajor, cblas_op(oa), cblas_op(ob), static_cast<int>(m), static_cast<int>(n), static_cast<int>(k),
              1.0, a, static_cast<int>(lda), b, static_cast<int>(ldb), beta, c, static_cast<int>(ldc));
}
#else
template <typename T>
using Strided = Eigen::Map<const Mat<T>, 0, Eigen::OuterStride<>>;

template <typename T, typename A, typename B>
void eigen_product(const A& a, const B& b, T beta, T* c, int64_t m, int64_t n, int64_t ldc) {
  Eigen::Map<Mat<T>, 0, Eigen::OuterStride<>> out(c, m, n, Eigen::OuterStride<>(ldc));
  if (beta == T(0)) {
    out.noalias() = a * b;
  } else {
    out.noalias() += a * b;
  }
}
#endif

}  // namespace

template <typename T>
void gemm(Op op_a, Op op_b, int64_t m, int64_t n, int64_t k, const T* a, int64_t lda, const T* b, int64_t ldb,
          T beta, T* c, int64_t ldc) {
#ifdef PSTRAIN_WITH_OPENBLAS
  blas_gemm(op_a, op_b, m, n, k, a, lda, b, ldb, beta, c, ldc);
#else
  const Strided<T> a_stored(a, op_a == Op::kNone ? m : k, op_a == Op::kNone ? k : m, Eigen::OuterStride<>(lda));
  const Strided<T> b_stored(b, op_b == Op::kNone ? k : n, op_b == Op::kNone ? n : k, Eigen::OuterStride<>(ldb));
  if (op_a == Op::kNone && op_b == Op::kNone) eigen_product(a_stored, b_stored, beta, c, m, n, ldc);
  if (op_a == Op::kNone && op_b == Op::kTranspose) eigen_product(a_stored, b_stored.transpose(), beta, c, m, n, ldc);
  if (op_a == Op::kTranspose && op_b == Op::kNone) eigen_product(a_stored.transpose(), b_stored, beta, c, m, n, ldc);
  if (op_a == Op::kTranspose && op_b == Op::kTranspose) {
    eigen_product(a_stored.transpose(), b_stored.transpose(), beta, c, m, n, ldc);
  }
#endif
}

template void gemm<float>(Op, Op, int64_t, int64_t, int64_t, const float*, int64_t, const float*, int64_t, float,
                          float*, int64_t);
template void gemm<double>(Op, Op, int64_t, int64_t, int64_t, const double*, int64_t, const double*, int64_t,
                           double, double*, int64_t);

}  // namespace pstrain::nn
