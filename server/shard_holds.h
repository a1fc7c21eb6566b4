// What a parameter shard may not do yet: the holds that stop sync steps at a version, and the
// generation fence that refuses pushes of an ended plan (docs/DESIGN-NOTES.md "Recovery").
//
//   - the cut hold (hold_from, cut_at): recovery and cuts (a preemption, a worker joining) keep
//     the shard at a version until restored, reset or released;
//   - the settle hold: a takeover re-plans without a rollback; numbered, so a newer settle (or a
//     rollback) makes an older one moot;
//   - the durability hold: training gets at most one backup interval past the last durable backup;
//   - the fence: pushes of a generation below it fail; it only ever rises, so a caller can tell
//     whether a newer plan came in since it looked.
// A rollback (restore or reset) lifts every hold and is counted, so a settle that started before
// it does not act after it.
//
// Thread rules: a plain value, owned by its ParameterShard (the server's event-loop thread).
#pragma once

#include <algorithm>
#include <cstdint>

namespace pstrain {

class ShardHolds {
 public:
  static constexpr uint64_t kNone = UINT64_MAX;

  // Sync steps apply only below this version.
  uint64_t limit() const { return std::min({cut_, settle_, durable_}); }

  // Sync: apply no step at or after `version` (pushes for it wait) until a restore or reset.
  void hold_from(uint64_t version) { cut_ = std::min(cut_, version); }
  // A re-plan without a rollback (a takeover): apply no step at or after `version` until the
  // settle is released. Returns the settle's number: a newer settle (or a rollback) makes an
  // older one moot.
  uint64_t settle_from(uint64_t version) {
    settle_ = version;
    return ++settles_;
  }
  uint64_t settles() const { return settles_; }
  // Backpressure for durability: apply no step at or after `version` until the backup before it
  // is written, so training never gets more than one backup interval past the last durable
  // backup, and a crash replays at most save_freq steps.
  void hold_until_durable(uint64_t version) { durable_ = std::min(durable_, version); }
  // How many rollbacks (restore or reset) ran: a settle that started before one must not act after.
  uint64_t rollbacks() const { return rollbacks_; }
  // From now on, pushes of a generation below `generation` fail (aborted = true): a rollback
  // calls it before its restore, so workers of the old plan cannot push into the restored state.
  void reject_below(uint64_t generation) { min_generation_ = std::max(min_generation_, generation); }
  bool rejects(uint64_t generation) const { return generation < min_generation_; }
  uint64_t min_generation() const { return min_generation_; }

 private:
  // Lifting or moving a hold frees steps that only the shard can apply: ParameterShard's own.
  friend class ParameterShard;
  void cut_at(uint64_t version) { cut_ = version; }  // replaces an earlier cut's hold
  void release_cut() { cut_ = kNone; }
  void release_settle() { settle_ = kNone; }
  void release_durable() { durable_ = kNone; }
  void rolled_back() {
    cut_ = settle_ = durable_ = kNone;
    ++rollbacks_;
  }
  void reject_all() { min_generation_ = kNone; }

  uint64_t cut_ = kNone, settle_ = kNone, durable_ = kNone;
  uint64_t settles_ = 0, rollbacks_ = 0;
  uint64_t min_generation_ = 0;
};

}  // namespace pstrain
