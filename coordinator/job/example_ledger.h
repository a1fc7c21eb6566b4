// The example ledger of a sync job: for each global step of the current timeline, what each slice
// was served, kept as a digest (common/data/example_digest.h: the examples' count and a 64-bit sum
// of a mix of their ids), never as the ids. A rollback to step b forgets the steps from b on, so
// at the end the ledger describes exactly the applied updates.
//
// The audit compares each recorded slice with the plan's (DataPlan, recomputed one epoch at a
// time): a slice whose digest is the plan's used exactly the plan's examples (a wrong set passes
// with a chance of about 2^-64), and an epoch's plan uses every example once (DATA and FILE
// policies) or once per slice (OFF), so an epoch whose slices all match used every example as
// planned. It prints, per epoch, "examples of epoch E: X used once, Y missing, Z used more than
// once" (tests read that line), and a line for slices that served other examples than planned.
//
// Bounded memory: steps no rollback can reach any more (before the oldest complete backup the
// coordinator keeps) are folded, as they are audited, into per-epoch counts (fold_before), so the
// ledger holds the digests of the steps since that backup (about 200 bytes a step of two slices,
// in map nodes) and 40 bytes an epoch, whatever the dataset's size. A folded slice that had
// no record is kept aside with its planned digest, so a record that arrives late still counts. A
// rollback past folded steps (every kept backup unusable) cannot take them back: the epochs it
// reaches into are reported as not audited, and say why.
//
// Thread rules: event-loop thread only.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <utility>
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
    record(step, slice, digest(examples));
    if (streamed) streamed_ += examples.size();
  }
  void served(uint64_t step, uint32_t slice, Digest digest) {
    record(step, slice, digest);
    read_by_workers_ += digest.count;
  }
  // Training examples served so far (prefetched ones of plans a recovery abandoned included):
  // streamed by the coordinator, or read by workers from the dataset store.
  uint64_t streamed() const { return streamed_; }
  uint64_t read_by_workers() const { return read_by_workers_; }
  void forget_from(uint64_t step);
  void clear();
  // Audits the steps before `step` and keeps only their counts: no rollback goes back before it.
  void fold_before(const DataPlan& plan, uint64_t step);
  size_t steps_held() const { return steps_.size(); }

  struct EpochAudit {
    bool audited = false;  // false: trained before a coordinator restart, or rolled_back_past
    bool rolled_back_past = false;  // a rollback went back past this epoch's folded steps
    uint64_t once = 0, missing = 0, repeated = 0;
    uint64_t differing = 0;  // slices that served other examples than the plan's
  };
  // The audit of `epochs` epochs of `plan` (its slices as workers), `examples` in the split.
  std::vector<EpochAudit> audit(const DataPlan& plan, uint32_t epochs, uint32_t examples) const;
  // The audit, printed (one line per epoch, and one saying how many training examples the
  // coordinator streamed and how many workers read from the store themselves; stdout, flushed).
  void print_audit(const DataPlan& plan, uint32_t epochs, uint32_t examples) const;

 private:
  // An epoch's example uses as planned: recorded as planned, not recorded, and slices that
  // served other examples.
  struct Counts {
    uint64_t used = 0, unused = 0, differing = 0;
    bool rolled_back_past = false;
  };
  void record(uint64_t step, uint32_t slice, Digest digest);
  // Adds the audit of slice `slice` at global step `step` (planned: `planned`) to `counts`.
  void count(uint64_t step, uint32_t slice, const std::vector<uint32_t>& planned, Counts& counts) const;

  std::map<uint64_t, std::map<uint32_t, Digest>> steps_;  // global step -> slice -> digest (not folded)
  std::map<uint32_t, Counts> folded_;                      // epoch -> its folded steps' counts
  std::map<std::pair<uint64_t, uint32_t>, Digest> unrecorded_;  // folded (step, slice) without a record -> planned
  uint64_t folded_to_ = 0;                                 // steps before it are folded
  uint64_t steps_per_epoch_ = 1;                           // the plan's, known from the first fold
  std::optional<uint64_t> first_step_;  // the lowest step recorded (epochs before it: not audited)
  // The plan's shards of the epoch being folded (cursors that walk forward).
  std::optional<uint32_t> cached_epoch_;
  std::vector<DataPlan::EpochShard> cached_shards_;
  uint64_t streamed_ = 0, read_by_workers_ = 0;  // examples served either way (replays included)
};

}  // namespace pstrain
