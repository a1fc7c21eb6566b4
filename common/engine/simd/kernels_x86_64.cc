// The kernels built for x86-64 (common/engine/simd/kernels_target.inc).
#define PSTRAIN_SIMD_NS x86_64
#define PSTRAIN_SIMD_TARGET CpuTarget::kX86_64
#include "common/engine/simd/kernels_target.inc"
