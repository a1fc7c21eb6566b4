// A set of example ids as a digest: the count and a 64-bit sum of a mix of each id (splitmix64's
// finalizer), so two sets compare in O(1) memory (a different set matches with a chance of about
// 2^-64). The coordinator's example ledger keeps one per step and slice; a worker that reads its
// own examples computes the digest of what it read and reports it (docs/DESIGN-NOTES.md
// "Dataset store (issue 50)").
//
// Thread rules: a value; digest() is a pure function.
#pragma once

#include <cstdint>
#include <span>

namespace pstrain {

struct ExampleDigest {
  uint64_t count = 0, sum = 0;
  bool operator==(const ExampleDigest&) const = default;
};

inline uint64_t example_id_mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

inline ExampleDigest digest_of(std::span<const uint32_t> examples) {
  ExampleDigest d;
  d.count = examples.size();
  for (uint32_t e : examples) d.sum += example_id_mix(e);
  return d;
}

}  // namespace pstrain
