// The example ledger of a sync job: for each global step of the current timeline, what each slice
// was served, kept as a digest (common/data/example_digest.h: the examples' count and a 64-bit sum
// of a mix of their ids), never as the ids: its memory grows with the steps, not with the dataset. A rollback to step b forgets
// the steps from b on, so at the end the ledger describes exactly the applied updates.
//
// The audit compares each recorded slice with the plan's (DataPlan, recomputed one epoch at a
// time): a slice whose digest is the plan's used exactly the plan's examples (a wrong set passes
// with a chance of about 2^-64), and an epoch's plan uses every example once (DATA and FILE
// policies) or once per slice (OFF), so an epoch whose slices all match used every example as
// planned. It prints, per epoch, "examples of epoch E: X used once, Y missing, Z used more than
// once" (tests read that line), and a line for slices that served other examples than planned.
//
// Thread rules: event-loop thread only.
#pragma once

#include <cstdint>
#include <map>
#include <vector>

#include "common/data/data_plan.h"
#include "common/data/example_digest.h"

namespace pstrain {

class ExampleLedger {
 public:
  using Digest = ExampleDigest;
  static Digest digest(const std::vector<uint32_t>& examples) { return digest_of(examples); }

  // What slice `slice` was served at global step `step`: its examples, or their digest (a worker
  // that read them itself reports that).
  // `streamed`: the coordinator sent them (false: a record made ahead of a worker's reading).
  void served(uint64_t step, uint32_t slice, const std::vector<uint32_t>& examples, bool streamed = true) {
    steps_[step][slice] = digest(examples);
    if (streamed) streamed_ += examples.size();
  }
  void served(uint64_t step, uint32_t slice, Digest digest) {
    steps_[step][slice] = digest;
    read_by_workers_ += digest.count;
  }
  // Training examples served so far (prefetched ones of plans a recovery abandoned included):
  // streamed by the coordinator, or read by workers from the dataset store.
  uint64_t streamed() const { return streamed_; }
  uint64_t read_by_workers() const { return read_by_workers_; }
  void forget_from(uint64_t step) { steps_.erase(steps_.lower_bound(step), steps_.end()); }
  void clear() { steps_.clear(); }

  struct EpochAudit {
    bool audited = false;  // false: trained before a coordinator restart, not recorded here
    uint64_t once = 0, missing = 0, repeated = 0;
    uint64_t differing = 0;  // slices that served other examples than the plan's
  };
  // The audit of `epochs` epochs of `plan` (its slices as workers), `examples` in the split.
  std::vector<EpochAudit> audit(const DataPlan& plan, uint32_t epochs, uint32_t examples) const;
  // The audit, printed (one line per epoch, and one saying how many training examples the
  // coordinator streamed and how many workers read from the store themselves; stdout, flushed).
  void print_audit(const DataPlan& plan, uint32_t epochs, uint32_t examples) const;

 private:
  std::map<uint64_t, std::map<uint32_t, Digest>> steps_;  // global step -> slice -> digest
  uint64_t streamed_ = 0, read_by_workers_ = 0;  // examples served either way (replays included)
};

}  // namespace pstrain
