// The epoch order of a training split (common/data/windowed_order.h): a permutation for any size
// and window, a function of (seed, epoch, window) only, resumable at any position, equal to the
// in-memory order (epoch_order) when the window holds the split, never moving an example earlier
// than its window allows, and mixing a split stored class by class about as well as a full
// permutation does.
#include "common/data/windowed_order.h"

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <vector>

#include "common/base/rng.h"
#include "common/data/training_spec.h"

namespace pstrain {
namespace {

std::vector<uint32_t> all_of(WindowedOrder order) {
  std::vector<uint32_t> out;
  while (!order.done()) out.push_back(order.next());
  return out;
}

// The mean, over batches of `batch`, of the total-variation distance between a batch's class mix
// and the split's, for a split of `classes` equal classes stored one after the other.
double class_mix_distance(const std::vector<uint32_t>& order, uint32_t classes, size_t batch) {
  const size_t per_class = order.size() / classes;
  double sum = 0;
  size_t batches = 0;
  for (size_t first = 0; first + batch <= order.size(); first += batch, ++batches) {
    std::vector<double> count(classes, 0);
    for (size_t i = first; i < first + batch; ++i) count[order[i] / per_class] += 1;
    double tv = 0;
    for (double c : count) tv += std::abs(c / static_cast<double>(batch) - 1.0 / classes);
    sum += tv / 2;
  }
  return sum / static_cast<double>(batches);
}

}  // namespace

TEST_CASE("windowed order - a permutation of every example, for any size and window") {
  for (uint32_t n : {0u, 1u, 10u, 300u, 1000u, 4099u}) {
    for (uint64_t window : {uint64_t{1}, uint64_t{2}, uint64_t{7}, uint64_t{256}, uint64_t{1000}, uint64_t{n} + 5}) {
      std::vector<uint32_t> got = all_of(WindowedOrder(n, 42, 3, window));
      REQUIRE(got.size() == n);
      std::sort(got.begin(), got.end());
      for (uint32_t i = 0; i < n; ++i) CHECK(got[i] == i);
    }
  }
}

TEST_CASE("windowed order - a window that holds the split gives the in-memory epoch order") {
  for (uint32_t n : {1u, 2u, 17u, 1000u}) {
    for (uint32_t epoch : {0u, 1u, 9u}) {
      const std::vector<uint32_t> want = epoch_order(n, 1234, epoch);
      CHECK(all_of(WindowedOrder(n, 1234, epoch, n)) == want);
      CHECK(all_of(WindowedOrder(n, 1234, epoch, kDefaultShuffleWindow)) == want);
    }
  }
  CHECK(WindowedOrder::block_size(1000, 1000) == 1000);
  CHECK(WindowedOrder::block_size(1001, 1000) == 4);  // ceil(1000 / 256)
  CHECK(WindowedOrder(1001, 1, 0, 1000).block_order().size() == 251);
}

TEST_CASE("windowed order - a function of seed, epoch and window, and resuming at a position gives the same rest") {
  const uint32_t n = 240;
  const auto a = all_of(WindowedOrder(n, 5, 2, 16));
  CHECK(a == all_of(WindowedOrder(n, 5, 2, 16)));
  CHECK(a != all_of(WindowedOrder(n, 5, 3, 16)));
  CHECK(a != all_of(WindowedOrder(n, 6, 2, 16)));
  CHECK(a != all_of(WindowedOrder(n, 5, 2, 32)));
  for (uint64_t from : {uint64_t{0}, uint64_t{1}, uint64_t{15}, uint64_t{16}, uint64_t{100}, uint64_t{239}, uint64_t{240}}) {
    WindowedOrder order(n, 5, 2, 16);
    order.skip(from);
    CHECK(order.position() == from);
    std::vector<uint32_t> rest;
    while (!order.done()) rest.push_back(order.next());
    CHECK(rest == std::vector<uint32_t>(a.begin() + static_cast<long>(from), a.end()));
  }
}

TEST_CASE("windowed order - no example comes out more than a window before its place in the block stream") {
  const uint32_t n = 1600;
  const uint64_t window = 120;
  WindowedOrder order(n, 99, 0, window);
  const uint64_t block = order.block();
  CHECK(block == 1);  // ceil(120 / 256)
  std::vector<uint64_t> stream_pos(n);
  uint64_t p = 0;
  for (uint32_t b : order.block_order()) {
    for (uint64_t i = b * block; i < std::min<uint64_t>(n, (b + 1) * block); ++i) stream_pos[i] = p++;
  }
  REQUIRE(p == n);
  for (uint64_t k = 0; !order.done(); ++k) {
    const uint32_t id = order.next();
    CHECK(stream_pos[id] < k + window);
  }
}

TEST_CASE("windowed order - a split stored class by class is mixed within a few points of a full permutation") {
  // 10 classes of 20,000 examples stored one after the other (as class folders are), batches of
  // 64: the distance of each batch's class mix from the split's, for the full permutation and for
  // windows of 1/4 and 1/20 of the split. The figures are in docs/DESIGN-NOTES.md.
  const uint32_t n = 200000, classes = 10;
  const double full = class_mix_distance(epoch_order(n, 3, 0), classes, 64);
  const double quarter = class_mix_distance(all_of(WindowedOrder(n, 3, 0, n / 4)), classes, 64);
  const double twentieth = class_mix_distance(all_of(WindowedOrder(n, 3, 0, n / 20)), classes, 64);
  std::printf("class mix distance of batches of 64 (10 classes stored in order): full %.4f, window n/4 %.4f, n/20 %.4f\n",
              full, quarter, twentieth);
  CHECK(full < 0.2);
  CHECK(quarter < full + 0.02);
  CHECK(twentieth < full + 0.02);
  // Without the blocks' permutation a window of n/20 would see one class for most batches.
  CHECK(class_mix_distance(std::vector<uint32_t>([&] {
          std::vector<uint32_t> v(n);
          for (uint32_t i = 0; i < n; ++i) v[i] = i;
          return v;
        }()), classes, 64) > 0.85);
}

}  // namespace pstrain
