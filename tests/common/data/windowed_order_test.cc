// The epoch order of a sharded split (common/data/windowed_order.h): a permutation for any shard
// sizes and window, a function of (seed, epoch) only, resumable at any position, equal to the
// in-memory order (epoch_order) for one shard and a window of the whole split, and never moving
// an example earlier than its window allows.
#include "common/data/windowed_order.h"

#include <doctest/doctest.h>

#include <algorithm>
#include <vector>

#include "common/base/rng.h"

namespace pstrain {
namespace {

std::vector<uint64_t> all_of(WindowedOrder order) {
  std::vector<uint64_t> out;
  while (!order.done()) out.push_back(order.next());
  return out;
}

}  // namespace

TEST_CASE("windowed order - a permutation of every example, for any shard sizes and window") {
  const std::vector<std::vector<uint64_t>> splits = {{1}, {10}, {3, 0, 5, 1}, {100, 100, 100}, {0, 37, 0}, {7, 1, 64, 2, 9}};
  for (const auto& shards : splits) {
    uint64_t n = 0;
    for (uint64_t s : shards) n += s;
    for (uint64_t window : {uint64_t{1}, uint64_t{2}, uint64_t{7}, n, n + 5}) {
      if (window == 0) continue;
      std::vector<uint64_t> got = all_of(WindowedOrder(shards, 42, 3, window));
      REQUIRE(got.size() == n);
      std::sort(got.begin(), got.end());
      for (uint64_t i = 0; i < n; ++i) CHECK(got[i] == i);
    }
  }
}

TEST_CASE("windowed order - one shard and a window of the whole split is the in-memory epoch order") {
  for (uint32_t n : {1u, 2u, 17u, 1000u}) {
    for (uint32_t epoch : {0u, 1u, 9u}) {
      const std::vector<uint32_t> want = epoch_order(n, 1234, epoch);
      const std::vector<uint64_t> got = all_of(WindowedOrder({n}, 1234, epoch, n));
      REQUIRE(got.size() == want.size());
      for (size_t i = 0; i < n; ++i) CHECK(got[i] == want[i]);
    }
  }
}

TEST_CASE("windowed order - a function of seed and epoch, and resuming at a position gives the same rest") {
  const std::vector<uint64_t> shards = {50, 70, 30, 90};
  const auto a = all_of(WindowedOrder(shards, 5, 2, 16));
  CHECK(a == all_of(WindowedOrder(shards, 5, 2, 16)));
  CHECK(a != all_of(WindowedOrder(shards, 5, 3, 16)));
  CHECK(a != all_of(WindowedOrder(shards, 6, 2, 16)));
  for (uint64_t from : {uint64_t{0}, uint64_t{1}, uint64_t{15}, uint64_t{16}, uint64_t{100}, uint64_t{239}, uint64_t{240}}) {
    WindowedOrder order(shards, 5, 2, 16);
    order.skip(from);
    CHECK(order.position() == from);
    std::vector<uint64_t> rest;
    while (!order.done()) rest.push_back(order.next());
    CHECK(rest == std::vector<uint64_t>(a.begin() + static_cast<long>(from), a.end()));
  }
}

TEST_CASE("windowed order - no example comes out more than a window before its place in the shard stream") {
  const std::vector<uint64_t> shards = {40, 25, 60, 35};
  const uint64_t window = 12;
  WindowedOrder order(shards, 99, 0, window);
  // Each example's position in the stream: the shards in the order's permutation, in stored order.
  std::vector<uint64_t> first(shards.size()), stream_pos(160);
  for (size_t s = 1; s < shards.size(); ++s) first[s] = first[s - 1] + shards[s - 1];
  uint64_t p = 0;
  for (uint32_t s : order.shard_order()) {
    for (uint64_t i = 0; i < shards[s]; ++i) stream_pos[first[s] + i] = p++;
  }
  for (uint64_t k = 0; !order.done(); ++k) {
    const uint64_t id = order.next();
    CHECK(stream_pos[id] < k + window);
  }
}

}  // namespace pstrain
