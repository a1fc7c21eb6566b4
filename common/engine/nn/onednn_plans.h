// The oneDNN primitives of one layer, one plan per batch size (onednn_conv.h, onednn_matmul.h),
// bounded: a layer meets a few batch sizes in training (the batch, an epoch's last, the
// evaluation's), but a model serving predictions meets any up to its largest, and each plan holds
// JIT-compiled code and buffers. Past kMaxPlans the least recently used plan is dropped (it is
// made again if its batch size comes back; a plan carries nothing a result depends on).
//
// Thread rules: one thread at a time (the layer's). A reference from get() or add() is valid until
// the next add().
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <utility>

namespace pstrain::nn {

template <typename Plan>
class BoundedPlans {
 public:
  static constexpr size_t kMaxPlans = 8;

  // The plan for `batch`, or nullptr.
  Plan* get(int64_t batch) {
    auto it = plans_.find(batch);
    if (it == plans_.end()) return nullptr;
    it->second.second = ++clock_;
    return &it->second.first;
  }

  Plan& add(int64_t batch, Plan plan) {
    if (plans_.size() >= kMaxPlans) {
      auto oldest = plans_.begin();
      for (auto it = plans_.begin(); it != plans_.end(); ++it) {
        if (it->second.second < oldest->second.second) oldest = it;
      }
      plans_.erase(oldest);
    }
    auto& slot = plans_.insert_or_assign(batch, std::make_pair(std::move(plan), ++clock_)).first->second;
    return slot.first;
  }

  size_t size() const { return plans_.size(); }

 private:
  std::map<int64_t, std::pair<Plan, uint64_t>> plans_;  // by batch size: the plan, its last use
  uint64_t clock_ = 0;
};

}  // namespace pstrain::nn
