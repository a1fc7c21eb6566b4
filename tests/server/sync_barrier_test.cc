// The sync barrier (server/sync_barrier.h) alone: a step is ready when it has a push from every
// slice (or all but the backup workers), its pushes count in slice order whatever the arrival
// order, a slice pushed twice (a takeover racing the lost worker's push) counts once, a push
// whose caller left is forgotten, and an abort takes every held push of a chunk.
#include <doctest/doctest.h>

#include <memory>
#include <vector>

#include "server/sync_barrier.h"

namespace pstrain {
namespace {

SyncBarrier::Pending push(uint32_t key, uint64_t step, uint32_t slice, uint32_t slices, uint32_t examples,
                          std::shared_ptr<bool> alive = nullptr) {
  SyncBarrier::Pending p;
  p.request.key = key;
  p.request.step = step;
  p.request.slice = slice;
  p.request.slice_count = slices;
  p.request.worker = slice;
  p.request.examples = examples;
  if (alive) p.alive = [alive] { return *alive; };
  return p;
}

std::vector<uint32_t> counted_slices(const SyncBarrier::Step& s) {
  std::vector<uint32_t> out;
  for (const SyncBarrier::Pending* p : s.counted) out.push_back(p->request.slice);
  return out;
}

}  // namespace

TEST_CASE("sync barrier - ready with every slice, counted in slice order whatever the arrival order") {
  SyncBarrier barrier(0);
  barrier.add(7, push(7, 3, 2, 3, 10));
  CHECK(!barrier.take_ready(7, 3));
  barrier.add(7, push(7, 3, 0, 3, 11));
  CHECK(!barrier.take_ready(7, 3));
  barrier.add(7, push(7, 4, 0, 3, 99));  // the next step's push waits apart
  barrier.add(7, push(7, 3, 1, 3, 12));
  const auto step = barrier.take_ready(7, 3);
  REQUIRE(step);
  CHECK(counted_slices(*step) == std::vector<uint32_t>{0, 1, 2});
  CHECK(step->pushes.size() == 3);
  CHECK(step->examples == 33);
  CHECK(step->all_dense);
  CHECK(!step->any_sparse);
  CHECK(!barrier.take_ready(7, 3));  // taken out
  CHECK(!barrier.take_ready(7, 4));  // one of three
  CHECK(!barrier.take_ready(8, 3));  // another chunk has nothing
}

TEST_CASE("sync barrier - a slice pushed twice (takeover and the lost worker) counts once") {
  SyncBarrier barrier(0);
  barrier.add(1, push(1, 5, 1, 2, 8));
  barrier.add(1, push(1, 5, 1, 2, 8));  // the survivor's push for the lost worker's slice
  CHECK(!barrier.take_ready(1, 5));     // two pushes, one slice
  barrier.add(1, push(1, 5, 0, 2, 8));
  const auto step = barrier.take_ready(1, 5);
  REQUIRE(step);
  CHECK(step->pushes.size() == 3);  // every push is released with the step
  CHECK(counted_slices(*step) == std::vector<uint32_t>{0, 1});
  CHECK(step->examples == 16);
}

TEST_CASE("sync barrier - backup workers: ready without the last slices, late ones start a new wait") {
  SyncBarrier barrier(1);
  CHECK(barrier.has_backup_workers());
  barrier.add(2, push(2, 1, 2, 3, 4));
  CHECK(!barrier.take_ready(2, 1));
  barrier.add(2, push(2, 1, 0, 3, 4));
  const auto step = barrier.take_ready(2, 1);
  REQUIRE(step);
  CHECK(counted_slices(*step) == std::vector<uint32_t>{0, 2});
  CHECK(!SyncBarrier(0).has_backup_workers());
}

TEST_CASE("sync barrier - a push whose caller left is forgotten before the count") {
  SyncBarrier barrier(0);
  auto gone = std::make_shared<bool>(true);
  barrier.add(3, push(3, 9, 0, 2, 1, gone));
  barrier.add(3, push(3, 9, 1, 2, 1));
  *gone = false;  // its caller left: the gradient view is no longer valid
  CHECK(!barrier.take_ready(3, 9));
  barrier.add(3, push(3, 9, 0, 2, 1));  // sent again
  const auto step = barrier.take_ready(3, 9);
  REQUIRE(step);
  CHECK(step->pushes.size() == 2);
  CHECK(counted_slices(*step) == std::vector<uint32_t>{0, 1});
}

TEST_CASE("sync barrier - sparse and factored pushes are flagged, and an abort takes every step of a chunk") {
  SyncBarrier barrier(0);
  auto sparse = push(4, 1, 0, 2, 1);
  sparse.request.sparse = true;
  auto factored = push(4, 1, 1, 2, 1);
  factored.request.factors = std::make_shared<GradientFactors>();
  barrier.add(4, std::move(sparse));
  barrier.add(4, std::move(factored));
  const auto step = barrier.take_ready(4, 1);
  REQUIRE(step);
  CHECK(!step->all_dense);
  CHECK(step->any_sparse);

  barrier.add(5, push(5, 1, 0, 2, 1));
  barrier.add(5, push(5, 2, 1, 2, 1));
  barrier.add(6, push(6, 1, 0, 2, 1));
  CHECK(barrier.take_all(5).size() == 2);
  CHECK(barrier.take_all(5).empty());
  CHECK(barrier.take_all(6).size() == 1);
}

}  // namespace pstrain
