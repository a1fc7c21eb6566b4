// The most frequent keys of a stream: an id column's vocabulary (preprocessing.h encode "ids": ids'
// fingerprints) and a tokenizer's (tokenizer.h: tokens). Space-Saving (Metwally, Agrawal and El
// Abbadi, 2005) with `capacity` counters: while the stream holds at most `capacity` distinct keys
// every count is exact (so the top k is exact); beyond, a new key takes the counter of the
// lowest-ranked one and inherits its count + 1, so every key seen more than n / capacity times in n
// keeps a counter and no count is under its true one. Rank: count, greater first; ties by the key,
// the greater first when `kGreaterFirst` (Keras' vocabularies), else the smaller. Deterministic: the
// result is a function of the keys in stream order.
//
// Memory: `capacity` entries in two ordered containers (about 100 bytes each, plus a key's bytes).
//
// Thread rules: single-owner.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <map>
#include <set>
#include <utility>
#include <vector>

namespace pstrain {

template <typename Key, bool kGreaterFirst>
class TopKeys {
 public:
  explicit TopKeys(size_t capacity) : capacity_(std::max<size_t>(capacity, 1)) {}

  void add(const Key& key) {
    auto it = counts_.find(key);
    if (it != counts_.end()) {
      ranked_.erase({it->second, key});
      ranked_.emplace(++it->second, key);
      return;
    }
    uint64_t count = 1;
    if (counts_.size() == capacity_) {  // the lowest-ranked key gives up its counter
      const auto lowest = ranked_.begin();
      count = lowest->first + 1;
      counts_.erase(lowest->second);
      ranked_.erase(lowest);
      evicted_ = true;
    }
    counts_.emplace(key, count);
    ranked_.emplace(count, key);
  }

  // The `k` highest-ranked keys, highest first.
  std::vector<Key> top(size_t k) const {
    std::vector<Key> out;
    for (auto it = ranked_.rbegin(); it != ranked_.rend() && out.size() < k; ++it) out.push_back(it->second);
    return out;
  }
  bool exact() const { return !evicted_; }  // every count is the true one
  size_t size() const { return counts_.size(); }

 private:
  // Lowest rank first: the smaller count, then the key that ranks after the other.
  struct LowestFirst {
    bool operator()(const std::pair<uint64_t, Key>& a, const std::pair<uint64_t, Key>& b) const {
      if (a.first != b.first) return a.first < b.first;
      return kGreaterFirst ? a.second < b.second : b.second < a.second;
    }
  };
  size_t capacity_;
  std::map<Key, uint64_t> counts_;
  std::set<std::pair<uint64_t, Key>, LowestFirst> ranked_;
  bool evicted_ = false;
};

// Ids' fingerprints: ties to the smaller fingerprint.
using TopIds = TopKeys<uint64_t, false>;

}  // namespace pstrain
