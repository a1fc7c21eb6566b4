#include "common/simd/kernels.h"

#include <vector>

#include "common/aligned.h"

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

void outer_product(int64_t m, int64_t n, int64_t k, const float* a, int64_t lda, const float* b, int64_t ldb, float* c,
                   int64_t ldc) {
  thread_local std::vector<float, CacheAlignedAllocator<float>> scratch;
  const KernelTable& table = kernels();
  const size_t need = table.outer_product_scratch(m, n, k);
  if (scratch.size() < need) scratch.resize(need);
  table.outer_product(m, n, k, a, lda, b, ldb, c, ldc, scratch.data());
}

}  // namespace pstrain::simd
