// The kernels built for generic (common/simd/kernels_target.inc).
#define PSTRAIN_SIMD_NS generic
#define PSTRAIN_SIMD_TARGET CpuTarget::kGeneric
#include "common/simd/kernels_target.inc"
