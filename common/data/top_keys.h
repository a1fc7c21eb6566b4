// The most frequent keys of a stream: an id column's vocabulary (preprocessing.h encode "ids": ids'
// fingerprints) and a tokenizer's (tokenizer.h: tokens). Space-Saving (Metwally, Agrawal and El
// Abbadi, 2005) with `capacity` counters: while the stream holds at most `capacity` distinct keys
// every count is exact (so the top k is exact); beyond, a new key takes the counter of the
// lowest-ranked one and inherits its count + 1, so every key seen more than n / capacity times in n
// keeps a counter and no count is under its true one. Rank: count, greater first; ties by the key,
// the greater first when `kGreaterFirst` (Keras' vocabularies), else the smaller. Deterministic: the
// result is a function of the keys in stream order.
//
// Memory: `capacity` entries in a hash map and a heap (about 80 bytes each, plus a key's bytes
// twice). Time: a counted key is one hash lookup; an eviction pops the heap (stale entries of
// keys counted since are refreshed on the way).
//
// Thread rules: single-owner.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <unordered_map>
#include <utility>
#include <vector>

namespace pstrain {

template <typename Key, bool kGreaterFirst>
class TopKeys {
 public:
  explicit TopKeys(size_t capacity) : capacity_(std::max<size_t>(capacity, 1)) { counts_.reserve(capacity_); }

  void add(const Key& key) {
    auto it = counts_.find(key);
    if (it != counts_.end()) {
      ++it->second;  // (its heap entry goes stale; see evict_lowest)
      return;
    }
    uint64_t count = 1;
    if (counts_.size() == capacity_) {  // the lowest-ranked key gives up its counter
      count = evict_lowest() + 1;
      evicted_ = true;
    }
    counts_.emplace(key, count);
    heap_.emplace_back(count, key);
    std::push_heap(heap_.begin(), heap_.end(), HigherFirst{});
  }

  // The `k` highest-ranked keys, highest first.
  std::vector<Key> top(size_t k) const {
    std::vector<std::pair<uint64_t, Key>> ranked;
    ranked.reserve(counts_.size());
    for (const auto& [key, count] : counts_) ranked.emplace_back(count, key);
    const size_t n = std::min(k, ranked.size());
    std::partial_sort(ranked.begin(), ranked.begin() + static_cast<std::ptrdiff_t>(n), ranked.end(),
                      [](const auto& a, const auto& b) { return LowestFirst{}(b, a); });
    std::vector<Key> out;
    out.reserve(n);
    for (size_t i = 0; i < n; ++i) out.push_back(ranked[i].second);
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
  // std::*_heap keep the greatest first; ours is a min-heap by rank.
  struct HigherFirst {
    bool operator()(const std::pair<uint64_t, Key>& a, const std::pair<uint64_t, Key>& b) const { return LowestFirst{}(b, a); }
  };

  // Removes the lowest-ranked key; returns its count. The heap holds one entry per key with the
  // count it had when the entry was made (never more than its count now): a stale top is made
  // current and sifted down again, so the first current top has the least count, and among
  // equal counts (whose entries are all current) the lowest rank.
  uint64_t evict_lowest() {
    for (;;) {
      std::pop_heap(heap_.begin(), heap_.end(), HigherFirst{});
      auto& entry = heap_.back();
      const uint64_t count = counts_.at(entry.second);
      if (count == entry.first) {
        counts_.erase(entry.second);
        heap_.pop_back();
        return count;
      }
      entry.first = count;
      std::push_heap(heap_.begin(), heap_.end(), HigherFirst{});
    }
  }

  size_t capacity_;
  std::unordered_map<Key, uint64_t> counts_;
  std::vector<std::pair<uint64_t, Key>> heap_;  // (count when made, key): a min-heap by rank
  bool evicted_ = false;
};

// Ids' fingerprints: ties to the smaller fingerprint.
using TopIds = TopKeys<uint64_t, false>;

}  // namespace pstrain
