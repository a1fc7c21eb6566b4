// The async update rule (docs/DESIGN-NOTES.md "Staleness-aware async"): every push is applied at
// once, divided by its own examples; its staleness (the versions applied since the one it was
// computed on) is recorded, and the learning rate is scaled by async_lr (optim::Optimizer's
// lr_scale): "staleness" divides it by max(1, staleness), "batch_staleness" also multiplies it by
// (push examples / global_batch_size)^e, e the optimizer's batch_size_exponent() (1 for SGD, 0.5
// for Adam and Adagrad): the rate that gives its examples the progress a sync step would.
// Bounded staleness (SSP): with max_staleness k, the reply to a worker's push for its step c waits
// until every unfinished worker has pushed step c + 1 - k, so no worker runs more than k steps
// ahead of the slowest.
//
// Thread rules: owned by its ParameterShard (the server's event-loop thread); the replies it
// holds run inside applied(), worker_finished() or release_all().
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <utility>
#include <vector>

#include "server/shard_config.h"
#include "server/shard_push.h"

namespace pstrain {

class AsyncRule {
 public:
  AsyncRule(const ShardConfig& config, uint32_t workers, double batch_size_exponent);

  // A push computed on request.base_version arrives at a chunk at `version`: its staleness goes
  // into `stats`; returns the factor of its learning rate.
  float admit(const PushRequest& request, uint64_t version, ShardStats& stats) const;
  // The push was applied to chunk `key` (`clocked`: the shard's first chunk, whose pushes are the
  // workers' clocks). `release` answers it, now or once the slowest worker is close enough; then
  // every held reply that may go, chunk by chunk in key order.
  void applied(const PushRequest& request, bool clocked, std::function<void()> release);
  // This worker pushes no more; it no longer holds others back.
  void worker_finished(uint32_t worker);
  // A rollback: every worker's clock back to 0.
  void rolled_back();
  // Answers every reply held on chunk `key` now (an abort).
  void release_all(uint32_t key);

 private:
  uint64_t slowest_clock() const;
  void release_ready();

  int64_t max_staleness_;
  AsyncLr lr_rule_;
  int64_t global_batch_;
  double batch_size_exponent_;
  std::map<uint32_t, uint64_t> clocks_;  // steps pushed (of the first chunk) per worker
  std::vector<bool> finished_;
  std::map<uint32_t, std::vector<std::pair<uint64_t, std::function<void()>>>> held_;  // by chunk: (step, release)
};

}  // namespace pstrain
