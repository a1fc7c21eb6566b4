// Deterministic random numbers for initialisation and data order.
//
// The standard library's distributions are implementation-defined, so two builds (or a worker and
// the coordinator) could disagree on a shuffle. Everything that must be reproducible across
// processes uses this generator instead: xoshiro256** seeded through splitmix64, with exact
// integer ranges (Lemire's method) and floats built from the top 24 bits.
//
// Thread rules: an Rng is a value; use one per thread.
#pragma once

#include <cstdint>
#include <vector>

namespace pstrain {

class Rng {
 public:
  explicit Rng(uint64_t seed);

  uint64_t next_u64();
  // Uniform in [0, n), n > 0, without modulo bias.
  uint64_t uniform_index(uint64_t n);
  // Uniform float in [lo, hi).
  float uniform_float(float lo, float hi);

 private:
  uint64_t s_[4];
};

// Mixes several integers into one seed (used to derive per-epoch and per-layer seeds).
uint64_t mix_seed(uint64_t a, uint64_t b);

// The order in which the examples of `epoch` are visited: a Fisher-Yates shuffle of 0..n-1 seeded
// by (seed, epoch). Identical in every process for the same arguments.
std::vector<uint32_t> epoch_order(uint32_t n, uint64_t seed, uint32_t epoch);

}  // namespace pstrain
