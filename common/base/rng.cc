#include "common/base/rng.h"

#include <numeric>

namespace pstrain {
namespace {

uint64_t splitmix64(uint64_t& x) {
  uint64_t z = (x += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

}  // namespace

Rng::Rng(uint64_t seed) {
  for (auto& word : s_) word = splitmix64(seed);
}

uint64_t Rng::next_u64() {
  const uint64_t result = rotl(s_[1] * 5, 7) * 9;
  const uint64_t t = s_[1] << 17;
  s_[2] ^= s_[0];
  s_[3] ^= s_[1];
  s_[1] ^= s_[2];
  s_[0] ^= s_[3];
  s_[2] ^= t;
  s_[3] = rotl(s_[3], 45);
  return result;
}

uint64_t Rng::uniform_index(uint64_t n) {
  // Lemire's nearly-divisionless method, on 32-bit ranges widened to 64 via __int128.
  __extension__ using u128 = unsigned __int128;
  u128 m = static_cast<u128>(next_u64()) * n;
  auto low = static_cast<uint64_t>(m);
  if (low < n) {
    const uint64_t threshold = (0 - n) % n;
    while (low < threshold) {
      m = static_cast<u128>(next_u64()) * n;
      low = static_cast<uint64_t>(m);
    }
  }
  return static_cast<uint64_t>(m >> 64);
}

float Rng::uniform_float(float lo, float hi) {
  const float unit = static_cast<float>(next_u64() >> 40) * (1.0f / 16777216.0f);
  return lo + (hi - lo) * unit;
}

uint64_t mix_seed(uint64_t a, uint64_t b) {
  uint64_t x = a ^ (b * 0xd1342543de82ef95ULL);
  return splitmix64(x);
}

std::vector<uint32_t> epoch_order(uint32_t n, uint64_t seed, uint32_t epoch) {
  std::vector<uint32_t> order(n);
  std::iota(order.begin(), order.end(), 0u);
  Rng rng(mix_seed(seed, epoch));
  for (uint32_t i = n; i > 1; --i) {
    const auto j = static_cast<uint32_t>(rng.uniform_index(i));
    std::swap(order[i - 1], order[j]);
  }
  return order;
}

}  // namespace pstrain
