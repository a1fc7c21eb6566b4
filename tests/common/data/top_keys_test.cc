// The most frequent keys of a stream (top_keys.h): exact under the capacity, both tie rules, heavy
// hitters kept past it, the same answer for the same stream.
#include "common/data/top_keys.h"

#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
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
