#include "common/engine/compute_threads.h"

#include <Eigen/Core>
#include <atomic>
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

namespace {
std::atomic<int> configured_threads{0};  // set_compute_threads' last value; 0: never called
}  // namespace

int set_compute_threads(int n) {
  if (n <= 0) n = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  configured_threads.store(n, std::memory_order_relaxed);
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
  if (omp_in_parallel()) return 1;
  // The process's setting, not this thread's OpenMP default: a thread started after
  // set_compute_threads (a server's, a test's) has the runtime's default, one per core.
  const int configured = configured_threads.load(std::memory_order_relaxed);
  return configured > 0 ? configured : omp_get_max_threads();
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
