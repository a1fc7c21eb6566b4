#include "common/engine/simd/cpu_target.h"

#include <cstdlib>
#include <fstream>
#if defined(__x86_64__)
#include <cpuid.h>
#endif

#include "common/base/error.h"

namespace pstrain::simd {
namespace {

constexpr std::pair<CpuTarget, std::string_view> kNames[] = {
    {CpuTarget::kGeneric, "generic"},
    {CpuTarget::kX86_64, "x86-64"},
    {CpuTarget::kX86_64_V3, "x86-64-v3"},
    {CpuTarget::kX86_64_V4, "x86-64-v4"},
};

#if defined(__x86_64__)
// BMI2 and F16C read from CPUID directly: clang's __builtin_cpu_supports does not know "f16c".
bool has_bmi2_and_f16c() {
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (__get_cpuid(1, &a, &b, &c, &d) == 0 || (c & bit_F16C) == 0) return false;
  if (__get_cpuid_count(7, 0, &a, &b, &c, &d) == 0) return false;
  return (b & bit_BMI2) != 0;
}
#endif

CpuTarget detect() {
#if defined(__x86_64__)
  __builtin_cpu_init();
  const bool v4 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                  __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl");
  const bool v3 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
                  has_bmi2_and_f16c();
  if (v4 && v3) return CpuTarget::kX86_64_V4;
  if (v3) return CpuTarget::kX86_64_V3;
  return CpuTarget::kX86_64;
#else
  return CpuTarget::kGeneric;
#endif
}

struct Selection {
  CpuTarget detected, active;
  bool capped = false;
};

const Selection& selection() {
  static const Selection s = [] {
    Selection out;
    out.detected = out.active = detect();
    if (const char* cap = std::getenv("PSTRAIN_CPU_TARGET"); cap != nullptr && *cap != '\0') {
      const auto wanted = parse_target(cap);
      if (!wanted || (*wanted == CpuTarget::kGeneric) != (out.detected == CpuTarget::kGeneric)) {
        throw Error(std::string("PSTRAIN_CPU_TARGET must be x86-64, x86-64-v3 or x86-64-v4 on this CPU, not '") +
                    cap + "'");
      }
      if (*wanted < out.active) {
        out.active = *wanted;
        out.capped = true;
      }
    }
    return out;
  }();
  return s;
}

std::string cpu_model_name() {
  std::ifstream info("/proc/cpuinfo");
  std::string line;
  while (std::getline(info, line)) {
    if (line.rfind("model name", 0) == 0) {
      const auto colon = line.find(':');
      if (colon != std::string::npos) return line.substr(line.find_first_not_of(' ', colon + 1));
    }
  }
  return "unknown CPU";
}

}  // namespace

std::string_view target_name(CpuTarget t) {
  for (const auto& [target, name] : kNames) {
    if (target == t) return name;
  }
  return "?";
}

std::optional<CpuTarget> parse_target(std::string_view name) {
  for (const auto& [target, known] : kNames) {
    if (known == name) return target;
  }
  return std::nullopt;
}

CpuTarget detected_target() { return selection().detected; }
CpuTarget active_target() { return selection().active; }

bool cpu_runs(CpuTarget t) {
  const CpuTarget best = detected_target();
  if (best == CpuTarget::kGeneric || t == CpuTarget::kGeneric) return t == best;
  return t <= best;
}

std::string describe_cpu() {
  const Selection& s = selection();
  std::string text = cpu_model_name() + "; " + std::string(target_name(s.detected));
  if (s.capped) text += " (kernels " + std::string(target_name(s.active)) + ": PSTRAIN_CPU_TARGET)";
  return text;
}

}  // namespace pstrain::simd
