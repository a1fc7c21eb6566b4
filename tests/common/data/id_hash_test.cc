// Ids as fingerprints (common/data/id_hash.h): the published reference values of FNV-1a 64 and
// SplitMix64, known answers computed by the Python client's independent implementation
// (clients/python/pstrain/ids.py), and the stored form's round trip.
#include "common/data/id_hash.h"

#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <set>
#include <string>
#include <vector>

using namespace pstrain;

TEST_CASE("id fingerprints - the reference values of their parts") {
  // SplitMix64 seeded with 0: its first output (Vigna's reference implementation).
  CHECK(splitmix64_finalize(kSplitMix64Gamma) == 0xE220A8397B1DCDAFULL);
  // FNV-1a 64 of "a" is 0xAF63DC4C8601EC8C (the FNV reference test vectors).
  CHECK(string_fingerprint("a") == splitmix64_finalize(0xAF63DC4C8601EC8CULL) >> 16);
  CHECK(integer_fingerprint(0) == 0xE220A8397B1DULL);
}

TEST_CASE("id fingerprints - known answers, as the Python client computes them") {
  CHECK(string_fingerprint("") == 269561105066421ULL);
  CHECK(string_fingerprint("a") == 3026840406036ULL);
  CHECK(string_fingerprint("user-42") == 134233145272651ULL);
  CHECK(string_fingerprint("h\xC3\xA9llo") == 27364960676977ULL);  // "héllo" in UTF-8
  CHECK(string_fingerprint("42") == 180495167287574ULL);
  CHECK(integer_fingerprint(0) == 248629889170205ULL);
  CHECK(integer_fingerprint(1) == 159472906176770ULL);
  CHECK(integer_fingerprint(42) == 208731956981739ULL);
  CHECK(integer_fingerprint(-1) == 251622562667365ULL);
  CHECK(integer_fingerprint(std::numeric_limits<int64_t>::max()) == 46625482681859ULL);
  CHECK(integer_fingerprint(std::numeric_limits<int64_t>::min()) == 79296918065833ULL);
  const uint64_t a = string_fingerprint("a"), b = integer_fingerprint(42);
  CHECK(cross_fingerprint(a, b) == 276028393608756ULL);
  CHECK(cross_fingerprint(b, a) == 237176878429236ULL);  // a cross is ordered
  CHECK(cross_fingerprint(cross_fingerprint(a, b), string_fingerprint("z")) == 25890299812069ULL);
  CHECK(fingerprint_bin(a, 1000) == 36);
  CHECK(fingerprint_bin(b, 7) == 2);
  // Computable at compile time (a spec's constants may be checked there).
  static_assert(string_fingerprint("a") == 3026840406036ULL);
}

TEST_CASE("id fingerprints - 48 bits, spread over bins, and distinct for 200,000 ids") {
  std::set<uint64_t> seen;
  std::vector<uint64_t> per_bin(16);
  for (int64_t i = 0; i < 100'000; ++i) {
    for (const uint64_t f : {integer_fingerprint(i), string_fingerprint("item-" + std::to_string(i))}) {
      CHECK(f < kFingerprintLimit);
      seen.insert(f);
      ++per_bin[fingerprint_bin(f, 16)];
    }
  }
  CHECK(seen.size() == 200'000);  // (the chance of a collision here is 7e-5)
  for (const uint64_t n : per_bin) CHECK(std::abs(static_cast<double>(n) - 12'500.0) < 5 * std::sqrt(12'500.0));
}

TEST_CASE("id fingerprints - stored as two exact float32 values, and nothing else read back as one") {
  for (const uint64_t f : {uint64_t{0}, uint64_t{1}, string_fingerprint("x"), kFingerprintLimit - 1}) {
    const auto [high, low] = fingerprint_to_values(f);
    uint64_t back = 0;
    REQUIRE(fingerprint_from_values(high, low, &back));
    CHECK(back == f);
  }
  uint64_t out = 0;
  CHECK_FALSE(fingerprint_from_values(std::nanf(""), 1.0f, &out));
  CHECK_FALSE(fingerprint_from_values(1.0f, 0.5f, &out));
  CHECK_FALSE(fingerprint_from_values(-1.0f, 0.0f, &out));
  CHECK_FALSE(fingerprint_from_values(16'777'216.0f, 0.0f, &out));
  CHECK_FALSE(fingerprint_from_values(0.0f, std::numeric_limits<float>::infinity(), &out));
}
