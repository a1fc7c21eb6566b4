#include "common/engine/nn/row_groups.h"

#include <algorithm>

#include "common/engine/nn/gemm.h"

namespace pstrain::nn {

template <typename T>
void row_group_product(std::span<const T* const> kernel_rows, int64_t columns, const T* inputs, int64_t examples,
                       std::vector<T, CacheAlignedAllocator<T>>& gathered, T* result) {
  const auto k = static_cast<int64_t>(kernel_rows.size());
  if (k == 0) {
    std::fill_n(result, columns * examples, T(0));
    return;
  }
  gathered.resize(static_cast<size_t>(k * columns));
  for (int64_t i = 0; i < k; ++i) std::copy_n(kernel_rows[i], columns, gathered.data() + i * columns);
  gemm<T>(Op::kNone, Op::kNone, columns, examples, k, gathered.data(), columns, inputs, k, T(0), result, columns);
}

template void row_group_product<float>(std::span<const float* const>, int64_t, const float*, int64_t,
                                       std::vector<float, CacheAlignedAllocator<float>>&, float*);
template void row_group_product<double>(std::span<const double* const>, int64_t, const double*, int64_t,
                                        std::vector<double, CacheAlignedAllocator<double>>&, double*);

}  // namespace pstrain::nn
