#include "server/async_rule.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace pstrain {
namespace {

// The learning rate's factor for an async push (DESIGN-NOTES "Staleness-aware async"), t its
// staleness, b its examples, B the global batch, e the optimizer's batch_size_exponent():
//   constant         1
//   staleness        1 / max(1, t): a push on the current values (t = 0) or one version behind
//                    (t = 1: one other push came in between) keeps the full rate
//   batch_staleness  (b / B)^e / max(1, t): the rate for b examples that makes the progress per
//                    example of a sync step of B at the full rate, then divided by the staleness
float async_lr_scale(AsyncLr rule, uint64_t staleness, int64_t examples, int64_t global_batch, double exponent) {
  const float stale = staleness > 1 ? 1.0f / static_cast<float>(staleness) : 1.0f;
  switch (rule) {
    case AsyncLr::kConstant: return 1.0f;
    case AsyncLr::kStaleness: return stale;
    case AsyncLr::kBatchStaleness:
      return examples > 0 && global_batch > 0
                 ? static_cast<float>(std::pow(static_cast<double>(examples) / static_cast<double>(global_batch), exponent)) *
                       stale
                 : stale;
  }
  return 1.0f;
}

}  // namespace

AsyncRule::AsyncRule(const ShardConfig& config, uint32_t workers, double batch_size_exponent)
    : max_staleness_(config.max_staleness),
      lr_rule_(config.async_lr),
      global_batch_(config.global_batch_size),
      batch_size_exponent_(batch_size_exponent),
      finished_(workers, false) {
  for (uint32_t w = 0; w < workers; ++w) clocks_[w] = 0;
}

float AsyncRule::admit(const PushRequest& request, uint64_t version, ShardStats& stats) const {
  const uint64_t staleness = version - std::min(version, request.base_version);
  stats.max_staleness = std::max(stats.max_staleness, staleness);
  stats.staleness_sum += static_cast<double>(staleness);
  ++stats.async_pushes;
  return async_lr_scale(lr_rule_, staleness, request.examples, global_batch_, batch_size_exponent_);
}

void AsyncRule::applied(const PushRequest& request, bool clocked, std::function<void()> release) {
  if (clocked) {
    uint64_t& clock = clocks_[request.worker];
    clock = std::max(clock, request.step + 1);
  }
  const uint64_t next_step = request.step + 1;
  if (max_staleness_ < 0 || next_step <= slowest_clock() + static_cast<uint64_t>(max_staleness_)) {
    release();
  } else {
    held_[request.key].emplace_back(next_step, std::move(release));
  }
  release_ready();  // a clock moved: replies held on any chunk may now go
}

void AsyncRule::worker_finished(uint32_t worker) {
  if (worker < finished_.size()) finished_[worker] = true;
  release_ready();
}

void AsyncRule::rolled_back() {
  for (auto& [worker, clock] : clocks_) clock = 0;
}

void AsyncRule::release_all(uint32_t key) {
  const auto it = held_.find(key);
  if (it == held_.end()) return;
  auto held = std::move(it->second);
  it->second.clear();
  for (auto& [step, release] : held) release();
}

uint64_t AsyncRule::slowest_clock() const {
  uint64_t slowest = std::numeric_limits<uint64_t>::max();
  for (const auto& [worker, clock] : clocks_) {
    if (worker < finished_.size() && finished_[worker]) continue;
    slowest = std::min(slowest, clock);
  }
  return slowest;
}

void AsyncRule::release_ready() {
  if (max_staleness_ < 0) return;
  for (auto& [key, held] : held_) {
    const uint64_t slowest = slowest_clock();  // (per chunk: a released reply may push again)
    for (size_t i = 0; i < held.size();) {
      if (slowest == std::numeric_limits<uint64_t>::max() ||
          held[i].first <= slowest + static_cast<uint64_t>(max_staleness_)) {
        auto release = std::move(held[i].second);
        held.erase(held.begin() + static_cast<long>(i));
        release();
      } else {
        ++i;
      }
    }
  }
}

}  // namespace pstrain
