// The calling thread's OpenMP thread count held at 1 while a OneThread lives: how every oneDNN
// primitive of the engine runs (onednn_conv.h, onednn_matmul.h), so that its results do not depend
// on a thread count (with more threads oneDNN splits some sums over them). Parallelism comes from
// DataParallelModel's batch replicas instead.
//
// oneDNN's default scratchpad (DNNL_ENABLE_CONCURRENT_EXEC off, as Debian builds it) wants each
// primitive run on the thread that created it. Each replica's layers own their primitives, create
// them at their first call and run them on the replica's OpenMP thread: DataParallelModel gives
// replica r the same thread of its team (static schedule) at every step.
//
// Thread rules: a scope guard of the calling thread. Only in builds with oneDNN.
#pragma once

#ifdef _OPENMP
#include <omp.h>
#endif

namespace pstrain::nn {

class OneThread {
 public:
  OneThread() {
#ifdef _OPENMP
    saved_ = omp_get_max_threads();
    omp_set_num_threads(1);
#endif
  }
  ~OneThread() {
#ifdef _OPENMP
    omp_set_num_threads(saved_);
#endif
  }
  OneThread(const OneThread&) = delete;
  OneThread& operator=(const OneThread&) = delete;

 private:
  int saved_ = 1;
};

}  // namespace pstrain::nn
