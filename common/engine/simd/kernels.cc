#include "common/engine/simd/kernels.h"

#include <algorithm>
#include <vector>

#include "common/base/aligned.h"

namespace pstrain::simd {

#if defined(__x86_64__)
namespace x86_64 {
extern const KernelTable kTable;
}
namespace x86_64_v3 {
extern const KernelTable kTable;
}
namespace x86_64_v4 {
extern const KernelTable kTable;
}
#else
namespace generic {
extern const KernelTable kTable;
}
#endif

const KernelTable* kernels_for(CpuTarget t) {
  if (!cpu_runs(t)) return nullptr;
  switch (t) {
#if defined(__x86_64__)
    case CpuTarget::kX86_64: return &x86_64::kTable;
    case CpuTarget::kX86_64_V3: return &x86_64_v3::kTable;
    case CpuTarget::kX86_64_V4: return &x86_64_v4::kTable;
    case CpuTarget::kGeneric: return nullptr;
#else
    case CpuTarget::kGeneric: return &generic::kTable;
    default: return nullptr;
#endif
  }
  return nullptr;
}

const KernelTable& kernels() {
  static const KernelTable* const table = kernels_for(active_target());
  return *table;
}

namespace {

void product_on_this_thread(const KernelTable& table, int64_t m, int64_t n, int64_t k, Operand a, Operand b,
                            bool accumulate, float* c, int64_t ldc) {
  thread_local std::vector<float, CacheAlignedAllocator<float>> scratch;
  const size_t need = table.product_scratch(m, n, k);
  if (scratch.size() < need) scratch.resize(need);
  table.product(m, n, k, a.data, a.row, a.step, b.data, b.row, b.step, accumulate, c, ldc, scratch.data());
}

}  // namespace

void product(int64_t m, int64_t n, int64_t k, Operand a, Operand b, bool accumulate, float* c, int64_t ldc,
             int threads) {
  const KernelTable& table = kernels();
  // Below about a million multiply-adds a thread's share is not worth waking it for.
  const int64_t tiles = (n + table.nr - 1) / table.nr;
  if (threads <= 1 || tiles < 2 || m * n * k < (int64_t{1} << 20)) {
    product_on_this_thread(table, m, n, k, a, b, accumulate, c, ldc);
    return;
  }
  const int parts = static_cast<int>(std::min<int64_t>(threads, tiles));
#pragma omp parallel for num_threads(parts) schedule(static, 1)
  for (int t = 0; t < parts; ++t) {
    const int64_t first = tiles * t / parts * table.nr, last = std::min(n, tiles * (t + 1) / parts * table.nr);
    if (last <= first) continue;
    product_on_this_thread(table, m, last - first, k, a, {b.data + first * b.row, b.row, b.step}, accumulate,
                           c + first * ldc, ldc);
  }
}

}  // namespace pstrain::simd
