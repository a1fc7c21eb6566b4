// The part of one job's parameters that one server holds: storage, versions and snapshots, with
// an update rule (docs/DESIGN-NOTES.md "Loss scaling", "Deterministic reduction" and
// "Staleness-aware async") and the holds that stop it (shard_holds.h).
//
// Pure logic, no RPC: the Cap'n Proto layer (parameter_server.h) turns calls into push()/pull()
// and completes its replies from the callbacks, which is also how the unit tests drive it.
//
// Sync mode (SyncBarrier, sync_barrier.h): pushes for step s are held (zero-copy: the gradient
// view must stay valid until the push's callback runs, which the RPC layer guarantees by keeping
// the call open) until the step has all its pushes, then summed here in slice order, divided by
// the step's examples, regularised once, and applied: version becomes s + 1. Pushes for a step
// that was already applied (stragglers under backup_workers) are dropped.
// Async mode (AsyncRule, async_rule.h): every push is applied at once with its learning-rate
// factor, and its reply waits under bounded staleness.
//
// Thread rules: event-loop thread only (the server's KJ thread). Callbacks run inside push(),
// pull() or worker_finished() calls, synchronously.
#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include <variant>

#include "common/base/aligned.h"
#include "common/engine/chunk_plan.h"
#include "common/engine/optim/optimizer.h"
#include "server/async_rule.h"
#include "server/backup_store.h"
#include "server/shard_config.h"
#include "server/shard_holds.h"
#include "server/shard_push.h"
#include "server/sync_barrier.h"

namespace pstrain {

class ParameterShard {
 public:
  using PushDone = pstrain::PushDone;
  using PullDone = std::function<void(uint64_t version)>;

  // Keeps the chunks of `table` placed on `server_index`, initialised from the model's seed
  // exactly as the standalone trainer initialises the whole model.
  ParameterShard(const ShardConfig& config, std::vector<ChunkInfo> table, uint32_t server_index, uint32_t workers);
  ~ParameterShard();

  bool holds(uint32_t key) const { return chunks_.count(key) != 0; }
  size_t chunk_size(uint32_t key) const;
  // The columns of the kernel whose whole rows the chunk holds, or 0 if it is not such a chunk
  // (a bias, a conv kernel, a cut inside a row): only such chunks take factored pushes.
  size_t row_columns(uint32_t key) const;
  // The chunk's first kernel row (when row_columns(key) > 0).
  size_t first_row(uint32_t key) const;
  // The tensor (index in the layout) the chunk is part of.
  uint32_t param_of(uint32_t key) const { return chunks_.at(key).info.param; }
  uint64_t version(uint32_t key) const;
  std::span<const float> values(uint32_t key) const;
  // The chunk's values at exactly `version`: the current ones, or those before the last update
  // (a takeover computes on the step's version after some of its chunks moved on); nullopt when
  // this shard no longer has them.
  std::optional<std::span<const float>> values_at(uint32_t key, uint64_t version) const;
  std::vector<uint32_t> keys() const;
  // Sync: the compression state (residual, warm-start factors) that slice `worker` pushed with
  // the step that made the chunk's current version, or that the restored backup of that version
  // held; nullptr if there is none (the version is not a backup point, or the slice sent none).
  // Async: the state the worker last put (set_worker_state), or the restored backup's.
  const std::vector<float>* worker_state(uint32_t key, uint32_t worker) const;
  // Async: the worker's compression state for the chunk as it pauses for a cut (putState), kept
  // until it puts another; snapshot_each() and restore() carry it like a sync step's.
  void set_worker_state(uint32_t key, uint32_t worker, std::span<const float> state);
  // Forward on the servers (ParameterServer.pushFactors' next* fields, common/engine/nn/row_groups.h):
  // result (columns x examples, 64-byte aligned) = the sum over `rows` of each row's current
  // values times its inputs (examples x rows.size(), example after example, 64-byte aligned).
  // Preconditions (checked by the RPC layer): the keys hold whole rows of one kernel, and every
  // row, ascending, lies in one of their chunks.
  void partial_product(const std::vector<uint32_t>& keys, const std::vector<uint32_t>& rows, const float* inputs,
                       size_t examples, float* result) const;

  // Preconditions (checked by the RPC layer): holds(key), gradient.size() == chunk_size(key) (or,
  // when sparse, parts sorted, disjoint and inside the chunk; when factored, row_columns(key) ==
  // factors->columns and the factors' sizes match), slice < slice_count. `done` is called exactly
  // once, possibly later, unless `alive` (when
  // given) turns false first: then the push is forgotten without touching its gradient (the RPC
  // layer passes "the caller is still waiting", because a cancelled call frees its gradient).
  void push(const PushRequest& request, PushDone done, std::function<bool()> alive = {});
  // `done` is called once the chunk's version is at least min_version.
  void pull(uint32_t key, uint64_t min_version, PullDone done);
  // Async: this worker pushes no more; it no longer holds others back.
  void worker_finished(uint32_t worker);

  // Backups: every version v with is_backup_point(v) is snapshotted chunk by chunk as each chunk
  // reaches it (a copy of values and optimizer slots); once every chunk of this shard has its
  // snapshot, `ready` receives them all (on this thread, inside push()).
  using BackupReady = std::function<void(uint64_t version, std::vector<ChunkSnapshot> chunks)>;
  void enable_backups(std::function<bool(uint64_t)> is_backup_point, BackupReady ready);
  // Snapshots of every chunk as it is now, each with its own version.
  std::vector<ChunkSnapshot> snapshot_each() const;
  // Replaces every chunk's state with the snapshots (which must cover this shard's chunks) and
  // answers all waiting pushes and pulls with aborted = true.
  void restore(const std::map<uint32_t, ChunkSnapshot>& snapshots);
  // Back to the initial values and fresh optimizer state (a rollback to step 0).
  void reset();
  // The job is being dropped: answers every waiting push (aborted = true), held reply and
  // waiting pull now, and fails every later push.
  void abandon();
  // Sync: apply no step at or after `version` (pushes for it wait) until restore() or reset().
  void hold_from(uint64_t version) { holds_.hold_from(version); }
  // A cut (preemption, a worker joining): back up every chunk at `version` (the caller has made it
  // a backup point) and hold there, replacing an earlier cut's hold. False, and nothing changes,
  // if a chunk is already past `version` (the caller tries again further ahead).
  bool backup_and_hold_at(uint64_t version);
  // Lifts a cut's hold (the cut was abandoned).
  void release_hold();
  // A re-plan without a rollback (a takeover): apply no step at or after `version` until
  // abort_waiting_and_release_hold(), which ends this hold only (not hold_from's).
  // Returns the settle's number: a newer settle (or a rollback) makes an older one moot.
  uint64_t settle_hold_from(uint64_t version) { return holds_.settle_from(version); }
  uint64_t settles() const { return holds_.settles(); }
  // Ends the settle hold: answers every waiting push, and from now on every push of a generation
  // below `min_generation`, with aborted = true, so the workers of the old plan ask for the new one.
  void abort_waiting_and_release_hold(uint64_t min_generation);
  // How many times restore() or reset() ran: a settle that started before a rollback must not
  // act after it.
  uint64_t rollbacks() const { return holds_.rollbacks(); }
  // From now on, pushes of a generation below `min_generation` fail (aborted = true): a rollback
  // calls it before restore(), so workers of the old plan cannot push into the restored state.
  void reject_generations_below(uint64_t min_generation) { holds_.reject_below(min_generation); }
  // The push fence: pushes of a generation below it fail. It only ever rises (a restore, the end
  // of a settle, abandon()), so a caller can tell whether a newer plan came in since it looked.
  uint64_t min_generation() const { return holds_.min_generation(); }
  // Backpressure for durability: apply no step at or after `version` until release_durability_hold()
  // (called when the backup before it is written), so training never gets more than one backup
  // interval past the last durable backup, and a crash replays at most save_freq steps.
  void hold_until_durable(uint64_t version) { holds_.hold_until_durable(version); }
  void release_durability_hold();

  // True when a chunk's values cannot change until every worker of the step has received its
  // push reply and pushed again: plain sync mode (no backup workers). Then a reply may send the
  // values without copying them. In async mode, or when late pushes are dropped, another push can
  // update the chunk while a reply is still being written, so replies must copy.
  bool values_stable_until_next_push() const {
    const auto* sync = std::get_if<SyncBarrier>(&rule_);
    return sync != nullptr && !sync->has_backup_workers();
  }

  const ShardStats& stats() const { return stats_; }
  // The job's global batch: no worker's batch is larger.
  int64_t global_batch() const { return global_batch_; }
  TrainingMode mode() const { return mode_; }

 private:
  struct Chunk {
    ChunkInfo info;
    size_t row_columns = 0;  // see row_columns()
    float l2 = 0;
    float moving_momentum = -1;  // >= 0: a batch_norm moving statistic (nn/moving_statistics.h)
    AlignedFloats values;
    // The values before the last update (the optimizer writes the new ones here, then the two
    // swap: no copy), valid for version previous_version; the current values are valid from
    // values_since (steps without examples do not change them) to `version`.
    AlignedFloats previous;
    uint64_t previous_version = UINT64_MAX;
    uint64_t values_since = 0;
    AlignedFloats scratch;  // summed gradient
    optim::OptimizerState optimizer_state;
    uint64_t version = 0;
    std::map<uint32_t, std::vector<float>> worker_state;   // by slice (worker): see worker_state()
    std::vector<std::pair<uint64_t, PullDone>> waiting_pulls;
    AlignedFloats initial;  // for reset()
  };
  void push_async(AsyncRule& rule, Chunk& chunk, const PushRequest& request, PushDone done);
  void push_sync(SyncBarrier& barrier, Chunk& chunk, const PushRequest& request, PushDone done,
                 std::function<bool()> alive);
  void take_snapshot_if_due(Chunk& chunk);
  void abort_waiting(Chunk& chunk);

  // Sync: applies the chunk's steps that have their pushes, up to the holds' limit.
  void apply_ready_sync_steps(Chunk& chunk);
  void apply_ready_sync_steps_everywhere();
  // The step's gradient, summed in slice order, scaled and regularised, into chunk.scratch.
  void reduce_step(Chunk& chunk, const SyncBarrier::Step& step);
  // Writes (first) or adds one push's gradient into `out` (the chunk's size).
  void accumulate(const PushRequest& push, const Chunk& chunk, bool first, float* out);
  void apply_update(Chunk& chunk, std::span<const float> summed_gradient, int64_t examples, float lr_scale = 1.0f);
  // The optimizer step on a finished gradient (scaled and regularised), keeping the old values.
  void step_values(Chunk& chunk, std::span<const float> gradient, float lr_scale = 1.0f);
  // The chunk's values were replaced (restore, reset): no older version is held.
  static void values_replaced(Chunk& chunk);
  void release_pulls(Chunk& chunk);
  // After restore() or reset(): holds lifted, waiting pushes aborted, clocks back to 0.
  void rolled_back(bool release_pulls_too);

  TrainingMode mode_;
  int64_t global_batch_ = 0;
  std::unique_ptr<optim::Optimizer> optimizer_;
  std::variant<SyncBarrier, AsyncRule> rule_;
  ShardHolds holds_;
  std::map<uint32_t, Chunk> chunks_;
  ShardStats stats_;
  std::function<bool(uint64_t)> is_backup_point_;
  BackupReady backup_ready_;
  std::map<uint64_t, std::vector<ChunkSnapshot>> snapshots_;  // by version, until complete
  uint64_t last_backup_ready_ = 0;  // newest version handed to backup_ready_
  // Scratch of partial_product.
  mutable std::vector<const float*> row_pointers_;
  mutable AlignedFloats gathered_rows_;
};

}  // namespace pstrain
