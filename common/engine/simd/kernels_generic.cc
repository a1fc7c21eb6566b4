// The kernels built for generic (common/engine/simd/kernels_target.inc).
#define PSTRAIN_SIMD_NS generic
#define PSTRAIN_SIMD_TARGET CpuTarget::kGeneric
#include "common/engine/simd/kernels_target.inc"
