#include "coordinator/job/example_ledger.h"

#include <algorithm>
#include <cstdio>

namespace pstrain {
std::vector<ExampleLedger::EpochAudit> ExampleLedger::audit(const DataPlan& plan, uint32_t epochs,
                                                            uint32_t examples) const {
  std::vector<EpochAudit> out(epochs);
  const uint32_t slices = plan.workers();
  const uint64_t steps = static_cast<uint64_t>(plan.steps_per_epoch(0));
  const uint64_t audited_from = steps_.empty() ? 0 : steps_.begin()->first;
  for (uint32_t e = 0; e < epochs; ++e) {
    EpochAudit& a = out[e];
    if (e * steps < audited_from) continue;
    a.audited = true;
    uint64_t used = 0, unused = 0;  // the plan's example uses, recorded as planned or not recorded
    for (uint32_t s = 0; s < slices; ++s) {
      const DataPlan::EpochShard shard = plan.shard(e, s);
      for (uint64_t step = 0; step < steps; ++step) {
        const std::vector<uint32_t> planned = shard.batch(static_cast<int64_t>(step));
        const auto at = steps_.find(e * steps + step);
        const Digest* got = nullptr;
        if (at != steps_.end()) {
          const auto it = at->second.find(s);
          if (it != at->second.end()) got = &it->second;
        }
        if (got == nullptr) {
          unused += planned.size();
        } else if (*got == digest(planned)) {
          used += planned.size();
        } else {
          ++a.differing;
        }
      }
    }
    // Every example's uses in the plan: once, or once per slice when each reads the whole split.
    const uint64_t per_example = examples == 0 ? 1 : std::max<uint64_t>(1, (used + unused) / examples);
    if (per_example == 1) {
      a.once = used;
    } else {
      a.repeated = used / per_example;
    }
    a.missing = unused / per_example;
  }
  return out;
}

void ExampleLedger::print_audit(const DataPlan& plan, uint32_t epochs, uint32_t examples) const {
  const std::vector<EpochAudit> audits = audit(plan, epochs, examples);
  for (size_t e = 0; e < audits.size(); ++e) {
    const EpochAudit& a = audits[e];
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
