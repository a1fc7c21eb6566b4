// The sync update rule's barrier (docs/DESIGN-NOTES.md "Deterministic reduction"): pushes for a
// chunk's step are held until the step has all of them (slice_count, or slice_count -
// backup_workers), then given back in slice order, one per slice, for the shard to sum. A slice
// can be in twice when a survivor pushed a lost worker's slice for it (a takeover) while the lost
// worker's own push was still open: same examples, same version, so one of them counts.
//
// Pushes are held zero-copy: a push's gradient view stays valid until its callback runs, or until
// its `alive` turns false (the caller left, which frees the gradient): such a push is forgotten
// without a look at its gradient.
//
// Thread rules: owned by its ParameterShard (the server's event-loop thread).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <vector>

#include "server/shard_push.h"

namespace pstrain {

class SyncBarrier {
 public:
  struct Pending {
    PushRequest request;
    PushDone done;
    std::function<bool()> alive;
    // A factored push's rows of its product, multiplied out on arrival (they live in
    // request.factors): `factor_listed` rows, numbered in factor_rows, values back to back.
    const uint32_t* factor_rows = nullptr;
    size_t factor_listed = 0;
    const float* factor_values = nullptr;
  };

  // A step with all its pushes: every push (released together once applied) and, in slice order,
  // the one of each slice that counts.
  struct Step {
    std::vector<Pending> pushes;
    std::vector<const Pending*> counted;
    int64_t examples = 0;
    bool all_dense = true;  // no sparse or factored push counts
    bool any_sparse = false;
  };

  explicit SyncBarrier(int64_t backup_workers) : backup_workers_(backup_workers) {}

  void add(uint32_t key, Pending push) { pending_[key][push.request.step].push_back(std::move(push)); }
  // Chunk `key`'s step `step` if it has its pushes (taken out), else nothing.
  std::optional<Step> take_ready(uint32_t key, uint64_t step);
  // Every push held for the chunk, step by step (for an abort).
  std::vector<Pending> take_all(uint32_t key);

  // True when late pushes are dropped rather than waited for.
  bool has_backup_workers() const { return backup_workers_ > 0; }

 private:
  int64_t backup_workers_;
  std::map<uint32_t, std::map<uint64_t, std::vector<Pending>>> pending_;  // by chunk key, then step
};

}  // namespace pstrain
