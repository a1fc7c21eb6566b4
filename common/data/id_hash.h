// Ids as fingerprints (docs/DESIGN-NOTES.md "Sparse models (issue 51)"): every categorical id, a
// string or an integer, is reduced once to a 48-bit fingerprint, and what comes after works on
// fingerprints: hashing into bins, vocabulary lookups, crosses of columns. The functions are
// fixed and documented, so a worker, `:predict`, an exported ONNX graph (integer ids) and the
// Python client (`pstrain.fingerprint`) compute the same values; tests pin known answers.
//
//   string   FNV-1a 64 over the UTF-8 bytes, then SplitMix64's finaliser, top 48 bits
//   integer  SplitMix64's finaliser of its two's complement + 0x9E3779B97F4A7C15 (SplitMix64's
//            increment: the first output of SplitMix64 seeded with it), top 48 bits
//   cross    SplitMix64's finaliser of (a * 0x9E3779B97F4A7C15) ^ b, top 48 bits
//   bin      fingerprint mod bins (bias below 2^-24 for bins up to 2^24)
//
// 48 bits because a fingerprint is stored as two float32 values of 24 bits each (exact in
// float32, never NaN, so NaN keeps meaning "missing"). Expected collisions among 10 million
// distinct ids: n^2 / 2^49 = 0.18.
//
// Thread rules: pure functions.
#pragma once

#include <cstdint>
#include <string_view>
#include <utility>

namespace pstrain {

inline constexpr int kFingerprintBits = 48;
inline constexpr uint64_t kFingerprintLimit = uint64_t{1} << kFingerprintBits;  // fingerprints are below it

// SplitMix64's increment (2^64 divided by the golden ratio, odd).
inline constexpr uint64_t kSplitMix64Gamma = 0x9E3779B97F4A7C15ULL;

// SplitMix64's output function (Steele, Lea and Flood, 2014): a bijection of 64-bit words
// whose every output bit depends on every input bit.
constexpr uint64_t splitmix64_finalize(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

// A string id's fingerprint (its bytes as given: the caller decides about case and spaces).
constexpr uint64_t string_fingerprint(std::string_view bytes) {
  uint64_t h = 0xCBF29CE484222325ULL;  // FNV-1a 64's offset basis
  for (const char c : bytes) {
    h ^= static_cast<uint8_t>(c);
    h *= 0x100000001B3ULL;  // FNV's 64-bit prime
  }
  return splitmix64_finalize(h) >> (64 - kFingerprintBits);
}

// A missing id's fingerprint (a hashed column's or a cross's missing value): the empty string's.
inline constexpr uint64_t kMissingIdFingerprint = string_fingerprint("");

// An integer id's fingerprint.
constexpr uint64_t integer_fingerprint(int64_t id) {
  return splitmix64_finalize(static_cast<uint64_t>(id) + kSplitMix64Gamma) >> (64 - kFingerprintBits);
}

// The fingerprint of the pair (a, b) of fingerprints, in that order; a cross of more columns
// folds left: cross(cross(a, b), c).
constexpr uint64_t cross_fingerprint(uint64_t a, uint64_t b) {
  return splitmix64_finalize((a * kSplitMix64Gamma) ^ b) >> (64 - kFingerprintBits);
}

// The bin of a fingerprint among `bins` (> 0).
constexpr uint64_t fingerprint_bin(uint64_t fingerprint, uint64_t bins) { return fingerprint % bins; }

// A fingerprint as two float32 values of 24 bits each (high, low), and back. from_stored_values
// returns false for values that are not such a pair (NaN, fractions, out of range).
inline std::pair<float, float> fingerprint_to_values(uint64_t fingerprint) {
  return {static_cast<float>(fingerprint >> 24), static_cast<float>(fingerprint & 0xFFFFFF)};
}
bool fingerprint_from_values(float high, float low, uint64_t* fingerprint);

}  // namespace pstrain
