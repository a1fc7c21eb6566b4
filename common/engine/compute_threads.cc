#include "common/engine/compute_threads.h"

#include <Eigen/Core>
#include <malloc.h>
#ifdef _OPENMP
#include <omp.h>
#endif
#include <thread>

#include "common/engine/nn/onednn_conv.h"
#include "common/engine/simd/cpu_target.h"

#ifdef PSTRAIN_WITH_OPENBLAS
extern "C" void openblas_set_num_threads(int num_threads);
extern "C" char* openblas_get_corename();
#endif

namespace pstrain {

int set_compute_threads(int n) {
  if (n <= 0) n = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  Eigen::setNbThreads(n);
#ifdef _OPENMP
  omp_set_num_threads(n);
#endif
#ifdef PSTRAIN_WITH_OPENBLAS
  openblas_set_num_threads(n);
#endif
  return n;
}

int threads_for_this_call() {
#ifdef _OPENMP
  return omp_in_parallel() ? 1 : omp_get_max_threads();
#else
  return 1;
#endif
}

std::string describe_compute() {
  std::string text = simd::describe_cpu();
  text += std::string("; oneDNN ") + nn::onednn_isa();
#ifdef PSTRAIN_WITH_OPENBLAS
  text += std::string("; OpenBLAS ") + openblas_get_corename();
#endif
  return text;
}

void keep_freed_memory() {
  mallopt(M_MMAP_THRESHOLD, 256 << 20);
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
}

}  // namespace pstrain
