// Sets how many threads the math may use: Eigen's own parallel products and, when the build
// routes products to OpenBLAS, OpenBLAS's thread pool.
#pragma once

#include <string>

namespace pstrain {

// n <= 0 means one per core. Returns the number chosen. Call from main before training.
int set_compute_threads(int n);

// The threads a kernel called here may use: set_compute_threads' count (this thread's OpenMP
// default before any call), or 1 when the caller already runs on one of the compute threads (a
// DataParallelModel replica's OpenMP thread). Thread-safe.
int threads_for_this_call();

// What this process computes with, for logs and the cluster view: the CPU, the level of our own
// kernels (common/engine/simd/cpu_target.h), oneDNN's instruction set and OpenBLAS's kernel set, e.g.
// "Intel(R) Xeon(R) Processor; x86-64-v4; oneDNN avx512_core; OpenBLAS SkylakeX".
std::string describe_compute();

// Keeps freed message buffers in the heap instead of returning them to the kernel: every training
// step receives megabytes of messages, and glibc's defaults (mmap above 128 KiB, trimming the heap
// top) turned that into page faults on every step. Call once from main.
void keep_freed_memory();

}  // namespace pstrain
