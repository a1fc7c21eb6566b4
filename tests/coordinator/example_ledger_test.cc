// The example ledger's audit (coordinator/job/example_ledger.h): digests of what each slice was
// served, checked against the plan: a whole run is every example once; forgotten steps are
// missing; a slice served other examples is counted as differing; a policy where every slice reads
// the whole split uses every example more than once; epochs before the first recorded step are
// not audited.
#include "coordinator/job/example_ledger.h"

#include <doctest/doctest.h>

#include <vector>

namespace pstrain {
namespace {

// Records every step of `epochs` epochs as the plan makes them.
void record_all(ExampleLedger& ledger, const DataPlan& plan, uint32_t epochs, uint32_t from_epoch = 0) {
  const auto steps = static_cast<uint64_t>(plan.steps_per_epoch(0));
  for (uint32_t e = from_epoch; e < epochs; ++e) {
    for (uint32_t s = 0; s < plan.workers(); ++s) {
      const DataPlan::EpochShard shard = plan.shard(e, s);
      for (uint64_t step = 0; step < steps; ++step) ledger.served(e * steps + step, s, shard.batch(static_cast<int64_t>(step)));
    }
  }
}

}  // namespace

TEST_CASE("example ledger - a whole run audits every example once, in every epoch") {
  const DataPlan plan(ShardPolicy::kData, TrainingMode::kSync, 100, 16, 3, 7);
  ExampleLedger ledger;
  record_all(ledger, plan, 2);
  for (const auto& a : ledger.audit(plan, 2, 100)) {
    CHECK(a.audited);
    CHECK(a.once == 100);
    CHECK(a.missing == 0);
    CHECK(a.repeated == 0);
    CHECK(a.differing == 0);
  }
}

TEST_CASE("example ledger - forgotten steps are missing, a replay restores them, a wrong slice differs") {
  const DataPlan plan(ShardPolicy::kData, TrainingMode::kSync, 100, 16, 3, 7);  // 7 steps an epoch
  ExampleLedger ledger;
  record_all(ledger, plan, 1);
  ledger.forget_from(5);  // steps 5 and 6: 16 + 4 examples
  auto a = ledger.audit(plan, 1, 100)[0];
  CHECK(a.once == 80);
  CHECK(a.missing == 20);
  record_all(ledger, plan, 1);  // the replay
  a = ledger.audit(plan, 1, 100)[0];
  CHECK(a.once == 100);
  CHECK(a.missing == 0);
  std::vector<uint32_t> wrong = plan.batch(0, 2, 1);
  wrong.back() = wrong.back() == 0 ? 1 : 0;
  ledger.served(2, 1, wrong);
  a = ledger.audit(plan, 1, 100)[0];
  CHECK(a.differing == 1);
  CHECK(a.once == 100 - wrong.size());
}

TEST_CASE("example ledger - every slice reading the whole split, and epochs before the first recorded step") {
  const DataPlan off(ShardPolicy::kOff, TrainingMode::kSync, 40, 8, 2, 1);
  ExampleLedger ledger;
  record_all(ledger, off, 1);
  auto a = ledger.audit(off, 1, 40)[0];
  CHECK(a.once == 0);
  CHECK(a.repeated == 40);
  CHECK(a.missing == 0);

  const DataPlan plan(ShardPolicy::kData, TrainingMode::kSync, 50, 10, 2, 3);
  ExampleLedger resumed;
  record_all(resumed, plan, 3, 1);  // a restarted coordinator saw epochs 2 and 3 only
  const auto audits = resumed.audit(plan, 3, 50);
  CHECK(!audits[0].audited);
  CHECK(audits[1].once == 50);
  CHECK(audits[2].once == 50);
}

}  // namespace pstrain
