// Space-Saving over fingerprints (top_ids.h).
#include "common/data/top_ids.h"

#include <algorithm>

namespace pstrain {

TopIds::TopIds(size_t capacity) : capacity_(std::max<size_t>(capacity, 1)) {}

void TopIds::add(uint64_t fingerprint) {
  auto it = counts_.find(fingerprint);
  if (it != counts_.end()) {
    by_count_.erase({it->second, fingerprint});
    by_count_.emplace(++it->second, fingerprint);
    return;
  }
  uint64_t count = 1;
  if (counts_.size() == capacity_) {  // the least counted id gives up its counter
    const auto least = by_count_.begin();
    count = least->first + 1;
    counts_.erase(least->second);
    by_count_.erase(least);
    evicted_ = true;
  }
  counts_.emplace(fingerprint, count);
  by_count_.emplace(count, fingerprint);
}

std::vector<uint64_t> TopIds::top(size_t k) const {
  std::vector<std::pair<uint64_t, uint64_t>> ranked(by_count_.begin(), by_count_.end());
  std::sort(ranked.begin(), ranked.end(), [](const auto& a, const auto& b) { return a.first != b.first ? a.first > b.first : a.second < b.second; });
  if (ranked.size() > k) ranked.resize(k);
  std::vector<uint64_t> out;
  out.reserve(ranked.size());
  for (const auto& r : ranked) out.push_back(r.second);
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace pstrain
