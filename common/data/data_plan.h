// Which examples each worker trains on, step by step: the shard policies (docs/DESIGN-NOTES.md
// "Data service").
//
// Every epoch e has a seeded order of the training split: WindowedOrder(n, shuffle_seed, e,
// shuffle_window) (common/data/windowed_order.h), which is epoch_order(n, shuffle_seed, e) for a
// split the window holds. No part of the plan holds a split's whole order: an epoch's shard walks
// the order forward, holding the window.
//   sync  + DATA: step s's global batch is order[s*B, (s+1)*B); it is cut into one contiguous
//                 slice per worker, so the union of the slices is exactly the global batch (the
//                 equivalence with one worker holds) and every example is used once per epoch.
//   async + DATA: worker i owns order[i], order[i+N], ... and takes batches of ceil(B/N) from it.
//   FILE:         the split is regarded as N files (contiguous blocks of the stored order);
//                 worker i reads block i, shuffled per epoch, in batches of ceil(B/N).
//   OFF:          every worker reads the whole split, in its own order, in batches of ceil(B/N).
// In sync mode every worker runs the same number of steps per epoch (the longest shard's); a
// worker whose shard has run out pushes empty slices.
//
// Thread rules: an immutable value; the coordinator, workers that read their own examples, the
// standalone trainer's tests use it. An EpochShard is used by one thread at a time.
#pragma once

#include <algorithm>
#include <cstdint>
#include <optional>
#include <vector>

#include "common/data/training_spec.h"
#include "common/data/windowed_order.h"

namespace pstrain {

struct JobSpec;

// How the test and validation splits are read: slice `slice` of `slices` takes its contiguous
// block of the split's `n` examples, in order, in batches of `batch`.
struct EvaluationBlock {
  uint32_t begin = 0, end = 0;
  int64_t batch = 1;
  static EvaluationBlock of(uint64_t n, uint32_t slice, uint32_t slices, int64_t batch) {
    return {static_cast<uint32_t>(n * slice / slices), static_cast<uint32_t>(n * (slice + 1) / slices), batch};
  }
  int64_t steps() const { return (end - begin + batch - 1) / batch; }
  std::vector<uint32_t> examples(int64_t step) const {
    std::vector<uint32_t> ids;
    for (int64_t i = begin + step * batch; i < std::min<int64_t>(end, begin + (step + 1) * batch); ++i) {
      ids.push_back(static_cast<uint32_t>(i));
    }
    return ids;
  }
};

class DataPlan {
 public:
  DataPlan(ShardPolicy policy, TrainingMode mode, uint32_t examples, int64_t global_batch, uint32_t workers,
           uint64_t shuffle_seed, uint64_t shuffle_window = kDefaultShuffleWindow);
  DataPlan(const JobSpec& spec, uint32_t examples, uint32_t workers);

  uint32_t workers() const { return workers_; }
  // Steps of one epoch for `worker` (the same for every worker in sync mode).
  int64_t steps_per_epoch(uint32_t worker) const;
  // One worker's epoch. batch(step) walks the epoch's order forward from the last step asked
  // for (an earlier step replays it from the epoch's start), holding the order's window only.
  class EpochShard {
   public:
    std::vector<uint32_t> batch(int64_t step) const;
    int64_t steps() const { return steps_; }

   private:
    friend class DataPlan;
    enum class Cut {
      kGlobal,   // sync + DATA: the worker's part of order[step*B, (step+1)*B)
      kStrided,  // async + DATA: order[worker], order[worker + N], ... in batches
      kOwn,      // FILE, OFF: the worker's own order (of its block, offset by base_), in batches
    };
    uint32_t at(uint64_t position) const;

    Cut cut_ = Cut::kGlobal;
    uint32_t length_ = 0, base_ = 0;  // the order's length, and what is added to its ids
    uint64_t seed_ = 0, window_ = 1;
    uint32_t epoch_ = 0;
    int64_t batch_ = 0, steps_ = 0;
    uint32_t worker_ = 0, workers_ = 1;
    mutable std::optional<WindowedOrder> order_;  // the walk's cursor
  };
  EpochShard shard(uint32_t epoch, uint32_t worker) const;

  // The examples (indices into the split) worker `worker` trains on at (epoch, step).
  std::vector<uint32_t> batch(uint32_t epoch, int64_t step, uint32_t worker) const {
    return shard(epoch, worker).batch(step);
  }

 private:
  int64_t per_worker_batch() const;
  uint64_t sequence_length(uint32_t worker) const;

  ShardPolicy policy_;
  TrainingMode mode_;
  uint32_t examples_;
  int64_t global_batch_;
  uint32_t workers_;
  uint64_t seed_;
  uint64_t window_;
};

}  // namespace pstrain
