// Which instruction-set level this process's hand-vectorized kernels run at (common/engine/simd/kernels.h).
//
// The binaries are built for one baseline (x86-64, or -march=native) and carry the kernels for
// several levels; the level is picked once, at first use, from the CPU's features:
//
//   x86-64      SSE2, 16 xmm registers, no FMA (any x86-64 CPU)
//   x86-64-v3   AVX2 and FMA, 16 ymm registers (Haswell and later, Zen)
//   x86-64-v4   AVX-512 F/BW/DQ/VL, 32 zmm registers (Skylake-SP and later, Zen 4)
//   generic     another architecture: the portable C++ of the kernels, as its compiler vectorizes it
//
// PSTRAIN_CPU_TARGET (environment: x86-64, x86-64-v3 or x86-64-v4) caps the level below what the
// CPU has, so that one machine can run what a smaller CPU runs (CI runs the equivalence tests this
// way). It also caps oneDNN's instruction set (common/engine/nn/onednn.h); OpenBLAS reads its own
// OPENBLAS_CORETYPE when it loads, which the caller sets (tests/cpu_targets.sh). Like the log
// level, this is process-wide: it is read once.
//
// Thread rules: every function is thread-safe.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace pstrain::simd {

enum class CpuTarget { kGeneric, kX86_64, kX86_64_V3, kX86_64_V4 };

std::string_view target_name(CpuTarget t);
std::optional<CpuTarget> parse_target(std::string_view name);

// The best level this CPU runs (kGeneric off x86).
CpuTarget detected_target();
// The level in use: detected_target(), capped by PSTRAIN_CPU_TARGET. Throws pstrain::Error for an
// unknown PSTRAIN_CPU_TARGET.
CpuTarget active_target();
// Whether this CPU can run code built for `t`.
bool cpu_runs(CpuTarget t);

// One line for logs and /v1/cluster: the CPU's model name, its best level and the one in use,
// e.g. "Intel(R) Xeon(R) Processor; x86-64-v4 (kernels x86-64-v3: PSTRAIN_CPU_TARGET)".
std::string describe_cpu();

}  // namespace pstrain::simd
