// The most frequent ids of a stream (a vocabulary lookup of an id column, preprocessing.h encode
// "ids"): Space-Saving (Metwally, Agrawal and El Abbadi, 2005) over fingerprints with `capacity`
// counters. While the stream holds at most `capacity` distinct ids every count is exact (so the
// top k is exact); beyond, a new id takes the counter of the least counted one (ties: the
// smallest fingerprint) and inherits its count + 1, so every id seen more than n / capacity times
// in n keeps a counter and no count is under its true one. Deterministic: the result is a function
// of the ids in stream order.
//
// Memory: `capacity` entries in two ordered containers (about 100 bytes each).
//
// Thread rules: single-owner.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <set>
#include <utility>
#include <vector>

namespace pstrain {

class TopIds {
 public:
  explicit TopIds(size_t capacity);

  void add(uint64_t fingerprint);
  // The `k` most counted ids (by count, then the smaller fingerprint), sorted by fingerprint.
  std::vector<uint64_t> top(size_t k) const;
  bool exact() const { return !evicted_; }  // every count is the true one

 private:
  size_t capacity_;
  std::map<uint64_t, uint64_t> counts_;             // fingerprint -> count
  std::set<std::pair<uint64_t, uint64_t>> by_count_;  // (count, fingerprint), least first
  bool evicted_ = false;
};

}  // namespace pstrain
