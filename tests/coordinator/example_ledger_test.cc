// The example ledger's audit (coordinator/job/example_ledger.h): digests of what each slice was
// served, checked against the plan: a whole run is every example once; forgotten steps are
// missing; a slice served other examples is counted as differing; a policy where every slice reads
// the whole split uses every example more than once; epochs before the first recorded step are
// not audited; folding the steps no rollback reaches keeps the audit and bounds the memory.
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

TEST_CASE("example ledger - folded steps audit as recorded ones, and the ledger holds only the steps since the fold") {
  // A windowed order (window 30 of 200 examples) and an uneven last batch: 4 slices, 13 steps.
  const DataPlan plan(ShardPolicy::kData, TrainingMode::kSync, 200, 16, 4, 5, 30);
  const auto steps = static_cast<uint64_t>(plan.steps_per_epoch(0));
  const uint32_t epochs = 3;
  ExampleLedger whole;
  record_all(whole, plan, epochs);
  const auto expected = whole.audit(plan, epochs, 200);
  for (const uint64_t every : {uint64_t{1}, uint64_t{5}, steps, uint64_t{17}}) {
    CAPTURE(every);
    ExampleLedger ledger;
    size_t held = 0;
    for (uint64_t step = 0; step < epochs * steps; ++step) {
      const auto e = static_cast<uint32_t>(step / steps);
      for (uint32_t s = 0; s < plan.workers(); ++s) ledger.served(step, s, plan.batch(e, static_cast<int64_t>(step % steps), s));
      if ((step + 1) % every == 0) ledger.fold_before(plan, step + 1 - std::min(step + 1, 2 * every));
      held = std::max(held, ledger.steps_held());
    }
    CHECK(held <= 2 * every + every);
    const auto audits = ledger.audit(plan, epochs, 200);
    for (uint32_t e = 0; e < epochs; ++e) {
      CHECK(audits[e].audited);
      CHECK(audits[e].once == expected[e].once);
      CHECK(audits[e].once == 200);
      CHECK(audits[e].missing == 0);
    }
  }
}

TEST_CASE("example ledger - a late record of a folded step counts, and a rollback past folded steps is not audited") {
  const DataPlan plan(ShardPolicy::kData, TrainingMode::kSync, 100, 16, 3, 7);  // 7 steps an epoch
  ExampleLedger ledger;
  record_all(ledger, plan, 2);
  ledger.forget_from(3);  // the records of step 3 on have not arrived yet
  ledger.fold_before(plan, 5);
  auto a = ledger.audit(plan, 2, 100);
  CHECK(a[0].missing == 100 - 3 * 16);
  // Step 3 slice 0 arrives late and as planned; step 4 slice 2 late and wrong; a repeat of step 1.
  ledger.served(3, 0, plan.batch(0, 3, 0));
  std::vector<uint32_t> wrong = plan.batch(0, 4, 2);
  wrong.front() = wrong.front() == 0 ? 1 : 0;
  ledger.served(4, 2, wrong);
  ledger.served(1, 1, plan.batch(0, 1, 1));
  a = ledger.audit(plan, 2, 100);
  const uint64_t one_slice = plan.batch(0, 3, 0).size();
  CHECK(a[0].once == 3 * 16 + one_slice);
  CHECK(a[0].differing == 1);
  CHECK(a[0].missing == 100 - 3 * 16 - one_slice - wrong.size());
  // The rest of epoch 0 and epoch 1 arrive; then every kept backup turns out unusable and the
  // job rolls back to step 2, before the fold: epoch 0 is not audited, epoch 1 still is.
  for (uint64_t step = 5; step < 14; ++step) {
    for (uint32_t s = 0; s < 3; ++s) ledger.served(step, s, plan.batch(static_cast<uint32_t>(step / 7), static_cast<int64_t>(step % 7), s));
  }
  ledger.fold_before(plan, 7);
  ledger.forget_from(2);
  record_all(ledger, plan, 2);
  a = ledger.audit(plan, 2, 100);
  CHECK(!a[0].audited);
  CHECK(a[0].rolled_back_past);
  CHECK(a[1].audited);
  CHECK(a[1].once == 100);
  ledger.clear();
  record_all(ledger, plan, 2);
  CHECK(ledger.audit(plan, 2, 100)[0].once == 100);
}

}  // namespace pstrain
