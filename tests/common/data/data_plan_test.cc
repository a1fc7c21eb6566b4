#include <doctest/doctest.h>

#include <algorithm>
#include <set>

#include "common/data/data_plan.h"
#include "common/base/rng.h"
#include "common/data/windowed_order.h"

using namespace pstrain;

TEST_CASE("sync DATA - the workers' slices of a step are exactly the global batch") {
  const uint32_t n = 1000;
  const int64_t batch = 128;
  const DataPlan plan(ShardPolicy::kData, TrainingMode::kSync, n, batch, 3, 22);
  const auto order = epoch_order(n, 22, 1);
  CHECK(plan.steps_per_epoch(0) == 8);
  std::vector<uint32_t> seen;
  for (int64_t step = 0; step < 8; ++step) {
    std::vector<uint32_t> step_examples;
    for (uint32_t w = 0; w < 3; ++w) {
      const auto b = plan.batch(1, step, w);
      step_examples.insert(step_examples.end(), b.begin(), b.end());
    }
    const int64_t first = step * batch;
    const int64_t len = std::min<int64_t>(batch, n - first);
    REQUIRE(static_cast<int64_t>(step_examples.size()) == len);
    CHECK(std::equal(step_examples.begin(), step_examples.end(), order.begin() + first));
    seen.insert(seen.end(), step_examples.begin(), step_examples.end());
  }
  std::sort(seen.begin(), seen.end());
  CHECK(std::adjacent_find(seen.begin(), seen.end()) == seen.end());
  CHECK(seen.size() == n);
}

TEST_CASE("one sync worker sees the standalone trainer's batches") {
  const DataPlan plan(ShardPolicy::kData, TrainingMode::kSync, 5002, 128, 1, 22);
  const auto order = epoch_order(5002, 22, 0);
  const auto last = plan.batch(0, 39, 0);
  CHECK(last.size() == 5002 - 39 * 128);
  CHECK(std::equal(last.begin(), last.end(), order.begin() + 39 * 128));
}

TEST_CASE("async DATA - every N-th example of the epoch order") {
  const DataPlan plan(ShardPolicy::kData, TrainingMode::kAsync, 10, 4, 2, 5);
  const auto order = epoch_order(10, 5, 0);
  CHECK(plan.steps_per_epoch(0) == 3);  // 5 examples in batches of 2
  CHECK(plan.batch(0, 0, 1) == std::vector<uint32_t>{order[1], order[3]});
  CHECK(plan.batch(0, 2, 0) == std::vector<uint32_t>{order[8]});
}

TEST_CASE("FILE gives each worker its own block and OFF gives everyone everything") {
  for (const TrainingMode mode : {TrainingMode::kSync, TrainingMode::kAsync}) {
    const DataPlan file(ShardPolicy::kFile, mode, 100, 20, 3, 1);
    std::set<uint32_t> all;
    for (uint32_t w = 0; w < 3; ++w) {
      std::set<uint32_t> mine;
      for (int64_t s = 0; s < file.steps_per_epoch(w); ++s) {
        for (uint32_t i : file.batch(0, s, w)) mine.insert(i);
      }
      CHECK(mine.size() == 100 * (w + 1) / 3 - 100 * w / 3);
      CHECK(*mine.begin() == 100 * w / 3);  // a contiguous block
      CHECK(*mine.rbegin() == 100 * (w + 1) / 3 - 1);
      all.insert(mine.begin(), mine.end());
    }
    CHECK(all.size() == 100);

    const DataPlan off(ShardPolicy::kOff, mode, 50, 20, 2, 1);
    for (uint32_t w = 0; w < 2; ++w) {
      std::set<uint32_t> mine;
      for (int64_t s = 0; s < off.steps_per_epoch(w); ++s) {
        for (uint32_t i : off.batch(0, s, w)) mine.insert(i);
      }
      CHECK(mine.size() == 50);
    }
    CHECK(off.batch(0, 0, 0) != off.batch(0, 0, 1));  // each worker in its own order
  }
}

TEST_CASE("a split larger than the shuffle window: every policy follows the windowed order, from any step") {
  const uint32_t n = 1000;
  const uint64_t window = 64;
  std::vector<uint32_t> order;
  for (WindowedOrder o(n, 22, 2, window); !o.done();) order.push_back(o.next());
  CHECK(order != epoch_order(n, 22, 2));
  // sync DATA: the slices of each step are the order's step, cut in 3; asked in any order.
  const DataPlan sync(ShardPolicy::kData, TrainingMode::kSync, n, 100, 3, 22, window);
  const DataPlan::EpochShard shard = sync.shard(2, 1);
  for (int64_t step : {4, 0, 9, 9, 3}) {
    const auto got = shard.batch(step);
    CHECK(got == std::vector<uint32_t>(order.begin() + step * 100 + 33, order.begin() + step * 100 + 66));
  }
  // async DATA: worker 1 of 2 takes order[1], order[3], ...
  const DataPlan async(ShardPolicy::kData, TrainingMode::kAsync, n, 100, 2, 22, window);
  const auto b = async.batch(2, 3, 1);
  REQUIRE(b.size() == 50);
  for (size_t k = 0; k < b.size(); ++k) CHECK(b[k] == order[(150 + k) * 2 + 1]);
  // FILE: worker 2's block [666, 1000) in its own windowed order.
  const DataPlan file(ShardPolicy::kFile, TrainingMode::kSync, n, 100, 3, 22, window);
  std::vector<uint32_t> own;
  for (WindowedOrder o(334, mix_seed(22, 2), 2, window); !o.done();) own.push_back(666 + o.next());
  CHECK(file.batch(2, 1, 2) == std::vector<uint32_t>(own.begin() + 34, own.begin() + 68));
}
