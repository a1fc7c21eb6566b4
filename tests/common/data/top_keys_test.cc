// The most frequent keys of a stream (top_keys.h): exact under the capacity, both tie rules, heavy
// hitters kept past it, the same answer for the same stream, and exactly Space-Saving by the book.
#include "common/data/top_keys.h"

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <random>
#include <string>
#include <vector>

using pstrain::TopIds;
using pstrain::TopKeys;

TEST_CASE("top keys: exact counts under the capacity, ties to the smaller id or to the greater token") {
  TopIds top(8);
  for (const uint64_t id : {5, 9, 5, 2, 9, 5, 7, 7, 1}) top.add(id);  // 5 x3, 9 x2, 7 x2, 2 x1, 1 x1
  CHECK(top.exact());
  CHECK(top.top(1) == std::vector<uint64_t>{5});
  CHECK(top.top(3) == std::vector<uint64_t>{5, 7, 9});
  CHECK(top.top(4) == std::vector<uint64_t>{5, 7, 9, 1});  // 1 before 2: the tie's smaller id
  CHECK(top.top(100) == std::vector<uint64_t>{5, 7, 9, 1, 2});
  CHECK(TopIds(8).top(3).empty());
  TopKeys<std::string, true> tokens(8);
  for (const char* t : {"b", "a", "c", "a", "b", "d"}) tokens.add(t);
  CHECK(tokens.top(10) == std::vector<std::string>{"b", "a", "d", "c"});  // Keras: (count, token) descending
}

TEST_CASE("top keys: past the capacity the heavy hitters of a power law keep their counters, the same on repeat") {
  // 200,000 draws over 100,000 ids, P(id) ~ 1 / (id + 1); 1,024 counters. Ids 0..9 are each drawn
  // far more than n / capacity times, so Space-Saving keeps them, in order.
  auto run = [] {
    std::mt19937_64 rng(3);
    std::uniform_real_distribution<double> u(0, 1);
    TopIds top(1024);
    for (int i = 0; i < 200'000; ++i) top.add(static_cast<uint64_t>(std::exp(u(rng) * std::log(100'001.0))) - 1);
    return top;
  };
  const TopIds top = run();
  CHECK_FALSE(top.exact());
  CHECK(top.size() == 1024);
  CHECK(top.top(10) == std::vector<uint64_t>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9});
  CHECK(run().top(500) == top.top(500));
}

namespace {

// Space-Saving by the book: a counter per key, the lowest-ranked found by a scan.
template <bool kGreaterFirst>
std::vector<uint64_t> space_saving(const std::vector<uint64_t>& stream, size_t capacity) {
  std::map<uint64_t, uint64_t> counts;
  auto lower = [](std::pair<uint64_t, uint64_t> a, std::pair<uint64_t, uint64_t> b) {  // (count, key): a ranks below b
    if (a.first != b.first) return a.first < b.first;
    return kGreaterFirst ? a.second < b.second : a.second > b.second;
  };
  for (const uint64_t key : stream) {
    if (auto it = counts.find(key); it != counts.end()) {
      ++it->second;
      continue;
    }
    uint64_t count = 1;
    if (counts.size() == capacity) {
      auto lowest = counts.begin();
      for (auto it = counts.begin(); it != counts.end(); ++it) {
        if (lower({it->second, it->first}, {lowest->second, lowest->first})) lowest = it;
      }
      count = lowest->second + 1;
      counts.erase(lowest);
    }
    counts.emplace(key, count);
  }
  std::vector<std::pair<uint64_t, uint64_t>> ranked;
  for (const auto& [key, count] : counts) ranked.emplace_back(count, key);
  std::sort(ranked.begin(), ranked.end(), [&](const auto& a, const auto& b) { return lower(b, a); });
  std::vector<uint64_t> out;
  for (const auto& r : ranked) out.push_back(r.second);
  return out;
}

}  // namespace

TEST_CASE("top keys: the heap with stale entries evicts exactly as Space-Saving by the book, for both tie rules") {
  std::mt19937_64 rng(11);
  std::uniform_real_distribution<double> u(0, 1);
  std::vector<uint64_t> stream;
  for (int i = 0; i < 20'000; ++i) stream.push_back(static_cast<uint64_t>(std::exp(u(rng) * std::log(2'001.0))) - 1);
  for (const size_t capacity : {1, 7, 100, 5'000}) {
    TopKeys<uint64_t, false> smaller_first(capacity);
    TopKeys<uint64_t, true> greater_first(capacity);
    for (const uint64_t key : stream) {
      smaller_first.add(key);
      greater_first.add(key);
    }
    CHECK(smaller_first.top(capacity) == space_saving<false>(stream, capacity));
    CHECK(greater_first.top(capacity) == space_saving<true>(stream, capacity));
  }
}
