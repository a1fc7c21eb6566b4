// Shared by the simd kernel tests: the tables of every level this binary has and this CPU runs.
#pragma once

#include <vector>

#include "common/engine/simd/kernels.h"

namespace pstrain::testing {

inline std::vector<const simd::KernelTable*> runnable_levels() {
  using simd::CpuTarget;
  std::vector<const simd::KernelTable*> out;
  for (CpuTarget t : {CpuTarget::kGeneric, CpuTarget::kX86_64, CpuTarget::kX86_64_V3, CpuTarget::kX86_64_V4}) {
    if (const simd::KernelTable* k = simd::kernels_for(t)) out.push_back(k);
  }
  return out;
}

}  // namespace pstrain::testing
