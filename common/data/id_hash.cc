#include "common/data/id_hash.h"

#include <cmath>

namespace pstrain {

bool fingerprint_from_values(float high, float low, uint64_t* fingerprint) {
  constexpr float kLimit = 16'777'216.0f;  // 2^24
  for (const float v : {high, low}) {
    if (!(v >= 0.0f && v < kLimit) || std::trunc(v) != v) return false;
  }
  *fingerprint = (static_cast<uint64_t>(high) << 24) | static_cast<uint64_t>(low);
  return true;
}

}  // namespace pstrain
