#include "coordinator/job/example_ledger.h"

#include <algorithm>
#include <cstdio>

namespace pstrain {

void ExampleLedger::record(uint64_t step, uint32_t slice, Digest digest) {
  first_step_ = std::min(first_step_.value_or(step), step);
  if (step >= folded_to_) {
    steps_[step][slice] = digest;
    return;
  }
  // A record of a folded step: counted now if the fold found none (a report that came late);
  // otherwise it repeats what was counted (a replayed stream records the same again).
  const auto missing = unrecorded_.find({step, slice});
  if (missing == unrecorded_.end()) return;
  Counts& counts = folded_[static_cast<uint32_t>(step / steps_per_epoch_)];
  counts.unused -= missing->second.count;
  if (digest == missing->second) {
    counts.used += missing->second.count;
  } else {
    ++counts.differing;
  }
  unrecorded_.erase(missing);
}

void ExampleLedger::forget_from(uint64_t step) {
  steps_.erase(steps_.lower_bound(step), steps_.end());
  if (step >= folded_to_) return;
  // Folded counts cannot be taken back: the epochs from the one holding `step` to the last
  // folded one are no longer audited (their steps from `step` on are folded again as replayed).
  for (uint64_t e = step / steps_per_epoch_; e <= (folded_to_ - 1) / steps_per_epoch_; ++e) {
    folded_[static_cast<uint32_t>(e)].rolled_back_past = true;
  }
  unrecorded_.erase(unrecorded_.lower_bound({step, 0}), unrecorded_.end());
  folded_to_ = step;
}

void ExampleLedger::clear() {
  steps_.clear();
  folded_.clear();
  unrecorded_.clear();
  folded_to_ = 0;
  first_step_.reset();
  cached_epoch_.reset();
  cached_shards_.clear();
}

void ExampleLedger::count(uint64_t step, uint32_t slice, const std::vector<uint32_t>& planned, Counts& counts) const {
  const Digest* got = nullptr;
  if (const auto at = steps_.find(step); at != steps_.end()) {
    if (const auto it = at->second.find(slice); it != at->second.end()) got = &it->second;
  }
  if (got == nullptr) {
    counts.unused += planned.size();
  } else if (*got == digest(planned)) {
    counts.used += planned.size();
  } else {
    ++counts.differing;
  }
}

void ExampleLedger::fold_before(const DataPlan& plan, uint64_t step) {
  steps_per_epoch_ = std::max<uint64_t>(1, static_cast<uint64_t>(plan.steps_per_epoch(0)));
  if (!first_step_ || step <= folded_to_) return;
  // Epochs that began before the first recorded step are not audited: nothing to count.
  const uint64_t first_audited = (*first_step_ + steps_per_epoch_ - 1) / steps_per_epoch_ * steps_per_epoch_;
  for (uint64_t s = std::max(folded_to_, first_audited); s < step; ++s) {
    const auto epoch = static_cast<uint32_t>(s / steps_per_epoch_);
    const auto at = static_cast<int64_t>(s % steps_per_epoch_);
    if (cached_epoch_ != epoch || cached_shards_.size() != plan.workers()) {
      cached_shards_.clear();
      for (uint32_t slice = 0; slice < plan.workers(); ++slice) cached_shards_.push_back(plan.shard(epoch, slice));
      cached_epoch_ = epoch;
    }
    Counts& counts = folded_[epoch];
    for (uint32_t slice = 0; slice < plan.workers(); ++slice) {
      const std::vector<uint32_t> planned = cached_shards_[slice].batch(at);
      const uint64_t unused = counts.unused;
      count(s, slice, planned, counts);
      if (counts.unused != unused) unrecorded_[{s, slice}] = digest(planned);
    }
  }
  steps_.erase(steps_.begin(), steps_.lower_bound(step));
  folded_to_ = step;
}

std::vector<ExampleLedger::EpochAudit> ExampleLedger::audit(const DataPlan& plan, uint32_t epochs,
                                                            uint32_t examples) const {
  std::vector<EpochAudit> out(epochs);
  const uint32_t slices = plan.workers();
  const uint64_t steps = static_cast<uint64_t>(plan.steps_per_epoch(0));
  const uint64_t audited_from = first_step_.value_or(0);
  for (uint32_t e = 0; e < epochs; ++e) {
    EpochAudit& a = out[e];
    if (e * steps < audited_from) continue;
    const auto folded = folded_.find(e);
    Counts counts = folded == folded_.end() ? Counts{} : folded->second;
    if (counts.rolled_back_past) {
      a.rolled_back_past = true;
      continue;
    }
    a.audited = true;
    // The steps not folded yet.
    const uint64_t begin = std::max<uint64_t>(e * steps, folded_to_);
    for (uint32_t s = 0; s < slices && begin < (e + 1) * steps; ++s) {
      const DataPlan::EpochShard shard = plan.shard(e, s);
      for (uint64_t step = begin; step < (e + 1) * steps; ++step) {
        count(step, s, shard.batch(static_cast<int64_t>(step - e * steps)), counts);
      }
    }
    // Every example's uses in the plan: once, or once per slice when each reads the whole split.
    const uint64_t uses = counts.used + counts.unused;
    const uint64_t per_example = examples == 0 ? 1 : std::max<uint64_t>(1, uses / examples);
    if (per_example == 1) {
      a.once = counts.used;
    } else {
      a.repeated = counts.used / per_example;
    }
    a.missing = counts.unused / per_example;
    a.differing = counts.differing;
  }
  return out;
}

void ExampleLedger::print_audit(const DataPlan& plan, uint32_t epochs, uint32_t examples) const {
  const std::vector<EpochAudit> audits = audit(plan, epochs, examples);
  for (size_t e = 0; e < audits.size(); ++e) {
    const EpochAudit& a = audits[e];
    if (a.rolled_back_past) {
      std::printf("examples of epoch %zu: not audited (a rollback went back past its folded steps)\n", e + 1);
      continue;
    }
    if (!a.audited) {
      std::printf("examples of epoch %zu: not audited (trained before a coordinator restart)\n", e + 1);
      continue;
    }
    std::printf("examples of epoch %zu: %llu used once, %llu missing, %llu used more than once\n", e + 1,
                static_cast<unsigned long long>(a.once), static_cast<unsigned long long>(a.missing),
                static_cast<unsigned long long>(a.repeated));
    if (a.differing > 0) {
      std::printf("examples of epoch %zu: %llu slice(s) of a step served other examples than the plan's\n", e + 1,
                  static_cast<unsigned long long>(a.differing));
    }
  }
  std::printf("training examples served: %llu streamed by the coordinator, %llu read by workers from the dataset store\n",
              static_cast<unsigned long long>(streamed_), static_cast<unsigned long long>(read_by_workers_));
  std::fflush(stdout);
}

}  // namespace pstrain
