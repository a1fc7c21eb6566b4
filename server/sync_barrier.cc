#include "server/sync_barrier.h"

#include <algorithm>

namespace pstrain {

std::optional<SyncBarrier::Step> SyncBarrier::take_ready(uint32_t key, uint64_t step) {
  auto& steps = pending_[key];
  auto it = steps.find(step);
  if (it == steps.end() || it->second.empty()) return std::nullopt;
  std::vector<Pending>& pushes = it->second;
  std::erase_if(pushes, [](const Pending& p) { return p.alive && !p.alive(); });
  if (pushes.empty()) return std::nullopt;
  const int64_t slices = pushes.front().request.slice_count;
  const int64_t needed = std::max<int64_t>(1, slices - backup_workers_);
  // Deterministic reduction: in slice order, whatever the arrival order was.
  std::stable_sort(pushes.begin(), pushes.end(),
                   [](const Pending& a, const Pending& b) { return a.request.slice < b.request.slice; });
  int64_t distinct = 0;
  for (size_t p = 0; p < pushes.size(); ++p) distinct += p == 0 || pushes[p].request.slice != pushes[p - 1].request.slice;
  if (distinct < needed) return std::nullopt;

  Step out;
  out.pushes = std::move(pushes);
  steps.erase(it);
  for (size_t p = 0; p < out.pushes.size(); ++p) {
    const Pending& push = out.pushes[p];
    if (p > 0 && push.request.slice == out.pushes[p - 1].request.slice) continue;
    out.counted.push_back(&push);
    out.examples += push.request.examples;
    out.all_dense = out.all_dense && !push.request.sparse && !push.request.factors;
    out.any_sparse = out.any_sparse || push.request.sparse;
  }
  return out;
}

std::vector<SyncBarrier::Pending> SyncBarrier::take_all(uint32_t key) {
  std::vector<Pending> out;
  const auto it = pending_.find(key);
  if (it == pending_.end()) return out;
  for (auto& [step, pushes] : it->second) {
    for (auto& p : pushes) out.push_back(std::move(p));
  }
  pending_.erase(it);
  return out;
}

}  // namespace pstrain
