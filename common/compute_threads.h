// Sets how many threads the math may use: Eigen's own parallel products and, when the build
// routes products to OpenBLAS, OpenBLAS's thread pool.
#pragma once

namespace pstrain {

// n <= 0 means one per core. Returns the number chosen. Call from main before training.
int set_compute_threads(int n);

}  // namespace pstrain
