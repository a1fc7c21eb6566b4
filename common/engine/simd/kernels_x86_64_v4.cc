// The kernels built for x86-64-v4 (common/engine/simd/kernels_target.inc).
#define PSTRAIN_SIMD_NS x86_64_v4
#define PSTRAIN_SIMD_TARGET CpuTarget::kX86_64_V4
#include "common/engine/simd/kernels_target.inc"
