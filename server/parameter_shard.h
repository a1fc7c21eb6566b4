// The part of one job's parameters that one server holds: storage, versions and snapshots, with
// an update rule (docs/DESIGN-NOTES.md "Loss scaling", "Deterministic reduction" and
// "Staleness-aware async") and the holds that stop it (shard_holds.h).
//
// Pure logic, no RPC: the Cap'n Proto layer (parameter_server.h) turns calls into push()/pull()
// and completes its replies from the callbacks, which is also how the unit tests drive it.
//
// Sync mode (SyncBarrier, sync_barrier.h): pushes for step s are held (zero-copy: the gradient
// view must stay valid until the push's callback runs, which the RPC layer guarantees by keeping
// the call open) until the step has all its pushes, then summed in slice order, divided by
// the step's examples, regularised once (step_reduction.h), and applied: version becomes s + 1. Pushes for a step
// that was already applied (stragglers under backup_workers) are dropped.
// Async mode (AsyncRule, async_rule.h): every push is applied at once with its learning-rate
// factor, and its reply waits under bounded staleness.
//
// Thread rules: event-loop thread only (the server's KJ thread). Callbacks run inside push(),
// pull() or worker_finished() calls, synchronously.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <variant>
#include <vector>

#include "common/engine/chunk_plan.h"
#include "common/engine/optim/optimizer.h"
#include "server/async_rule.h"
#include "server/backup_store.h"
#include "server/shard_chunk.h"
#include "server/shard_config.h"
#include "server/shard_holds.h"
#include "server/shard_push.h"
#include "server/shard_snapshots.h"
#include "server/sync_barrier.h"
#include "server/table_piece.h"

namespace pstrain {

class ParameterShard {
 public:
  // Keeps the chunks of `table` placed on `server_index`, initialised from the model's seed
  // exactly as the standalone trainer initialises the whole model. Memory: the dense chunks'
  // values while they are made (dense_size(), not the tables'), then each chunk's values,
  // slots and copies; a sparse table's piece only its values and slots (table_piece.h).
  ParameterShard(const ShardConfig& config, std::vector<ChunkInfo> table, uint32_t server_index, uint32_t workers);

  bool holds(uint32_t key) const { return chunks_.count(key) != 0; }
  // A chunk as it is now (read-only): its size, kernel rows, version, values (also those before
  // its last update) and the workers' compression states (shard_chunk.h). Precondition: holds(key).
  const ShardChunk& chunk(uint32_t key) const { return chunks_.at(key); }
  std::vector<uint32_t> keys() const;
  // Async: the worker's compression state for the chunk as it pauses for a cut (putState), kept
  // until it puts another; snapshot_each() and restore() carry it like a sync step's.
  void set_worker_state(uint32_t key, uint32_t worker, std::span<const float> state);

  // Preconditions (checked by the RPC layer): holds(key), gradient.size() == chunk(key).size() (or,
  // when sparse, parts sorted, disjoint and inside the chunk; for a table piece, table_push_error
  // empty; when factored, chunk(key).row_columns
  // == factors->columns and the factors' sizes match), slice < slice_count. `done` is called
  // exactly once, possibly later, unless `alive` (when given) turns false first: then the push is
  // forgotten without touching its gradient (the RPC layer passes "the caller is still waiting",
  // because a cancelled call frees its gradient).
  void push(const PushRequest& request, PushDone done, std::function<bool()> alive = {});
  // `done` is called once the chunk's version is at least min_version. With `clip_factor`
  // (clipping, sync), a held step of the chunk (PushOutcome::held) is applied first, its
  // gradient multiplied by the factor; without, the pull waits for a pull that brings one.
  void pull(uint32_t key, uint64_t min_version, ShardChunk::PullDone done,
            std::optional<float> clip_factor = std::nullopt);
  // Async: this worker pushes no more; it no longer holds others back.
  void worker_finished(uint32_t worker);

  // Backups: the chunks' snapshots at every backup point, handed to `ready` once complete
  // (shard_snapshots.h; on this thread, inside push()).
  void enable_backups(std::function<bool(uint64_t)> is_backup_point, ShardSnapshots::Ready ready) {
    snapshots_.enable(std::move(is_backup_point), std::move(ready));
  }
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

  // What the shard may not do yet (shard_holds.h). Tightening a hold (hold_from, settle_from,
  // hold_until_durable, reject_below) goes straight to it; lifting one goes through the calls
  // below, which apply the steps it was holding back.
  ShardHolds& holds() { return holds_; }
  const ShardHolds& holds() const { return holds_; }
  // A cut (preemption, a worker joining): back up every chunk at `version` (the caller has made it
  // a backup point) and hold there, replacing an earlier cut's hold. False, and nothing changes,
  // if a chunk is already past `version` (the caller tries again further ahead).
  bool backup_and_hold_at(uint64_t version);
  // Lifts a cut's hold (the cut was abandoned).
  void release_hold();
  // Ends the settle hold (a takeover's re-plan, holds().settle_from): answers every waiting push,
  // and from now on every push of a generation below `min_generation`, with aborted = true, so
  // the workers of the old plan ask for the new one.
  void abort_waiting_and_release_hold(uint64_t min_generation);
  // The backup before the durability hold (holds().hold_until_durable) is written: steps go on.
  void release_durability_hold();

  // True when a chunk's values cannot change until every worker of the step has received its
  // push reply and pushed again: plain sync mode (no backup workers). Then a reply may send the
  // values without copying them. In async mode, or when late pushes are dropped, another push can
  // update the chunk while a reply is still being written, so replies must copy.
  bool values_stable_until_next_push() const {
    const auto* sync = std::get_if<SyncBarrier>(&rule_);
    return sync != nullptr && !sync->has_backup_workers();
  }

  // Gradient clipping (sync): steps are held until a pull brings their factor.
  bool clips() const { return clips_; }
  const ShardStats& stats() const { return stats_; }
  // The job's global batch: no worker's batch is larger.
  int64_t global_batch() const { return global_batch_; }
  TrainingMode mode() const { return mode_; }

 private:
  void push_async(AsyncRule& rule, ShardChunk& chunk, const PushRequest& request, PushDone done);
  void push_sync(SyncBarrier& barrier, ShardChunk& chunk, const PushRequest& request, PushDone done,
                 std::function<bool()> alive);
  void abort_waiting(ShardChunk& chunk);
  // Sync: applies the chunk's steps that have their pushes, up to the holds' limit.
  void apply_ready_sync_steps(ShardChunk& chunk);
  void apply_ready_sync_steps_everywhere();
  // Clipping: sums the ready step into chunk.scratch and answers its pushes with its sum of
  // squares; apply_held_step() applies it with the factor a pull brought (chunk.held_factor).
  void hold_sync_step(ShardChunk& chunk, SyncBarrier::Step& step);
  void apply_held_step(ShardChunk& chunk);
  void apply_update(ShardChunk& chunk, std::span<const float> summed_gradient, int64_t examples, float lr_scale);
  // A table piece's step from its pushes (slice order).
  void apply_table_update(ShardChunk& chunk, std::span<const PushRequest* const> pushes, int64_t examples,
                          float lr_scale);
  // After restore() or reset(): holds lifted, waiting pushes aborted, clocks back to 0.
  void rolled_back(bool release_pulls_too);

  TrainingMode mode_;
  int64_t global_batch_ = 0;
  ParamLayout layout_;  // the model's, for the table pieces' initial values
  uint64_t seed_ = 0;
  bool lazy_tables_ = true;  // optimizer.sparse_updates "lazy"
  bool clips_ = false;       // optimizer.clipnorm or global_clipnorm: sync steps wait for a factor
  TableStep table_step_;     // a table piece's step, reused
  std::unique_ptr<optim::Optimizer> optimizer_;
  std::variant<SyncBarrier, AsyncRule> rule_;
  ShardHolds holds_;
  std::map<uint32_t, ShardChunk> chunks_;
  ShardStats stats_;
  ShardSnapshots snapshots_;
};

}  // namespace pstrain
