// JobRunner's cuts (DESIGN section 4): every server backs up at one step just ahead and holds
// there, so the job can be re-planned from that step with nothing replayed. A preemption notice
// (SIGTERM on a node) and a worker joining a job that runs short of workers both use one.
//
// The mark must reach every server before its chunks pass the step: the coordinator asks where
// the servers are and marks two steps ahead of the furthest chunk; a server already past the
// mark refuses it, and the cut is marked again further ahead (which replaces the holds already
// set). A cut that does not complete within 30 s is abandoned and its holds released.
#include <algorithm>

#include "common/log.h"
#include "coordinator/job/job_runner.h"

namespace pstrain {

kj::Promise<void> JobRunner::preempt(uint32_t node) {
  if (!uses_node(node)) return kj::READY_NOW;
  PSLOG(kInfo) << "job " << id_ << ": node " << node << " is being preempted";
  preempted_.insert(node);
  return cut();
}

void JobRunner::grow() {
  if (!sync()) {
    replace_lost_async_worker();
    return;
  }
  if (phase_ != Phase::kRunning || workers_.size() >= static_cast<size_t>(spec_.training.workers) ||
      cluster_.free_nodes(proto::Role::WORKER).empty()) {
    return;
  }
  // A worker is free and the job runs short of workers: cut at the next step (backup and hold,
  // as for a preemption) and re-plan from that very step with one more worker. Nothing is
  // replayed.
  PSLOG(kInfo) << "job " << id_ << ": a free worker can join; re-planning at the next step";
  grow_ = cut()
              .then([this] { recover("a worker joins"); })
              .eagerlyEvaluate([this](kj::Exception&& e) {
                PSLOG(kWarning) << "job " << id_ << ": could not add a worker: " << e.getDescription().cStr();
              });
}

kj::Promise<void> JobRunner::cut() {
  // One cut at a time: a preemption during a cut waits for that cut's backup, which is just as
  // good. A cut is for a running sync job only; during a takeover, a recovery or the
  // configuration there is nothing to hold (the node's loss is handled as a loss).
  KJ_IF_MAYBE(running, sync_cut_) {
    if (phase_ == Phase::kCutting) return running->addBranch();
  }
  if (phase_ != Phase::kRunning || !sync()) return kj::READY_NOW;
  phase_ = Phase::kCutting;
  auto forked = run_cut().fork();
  auto branch = forked.addBranch();
  sync_cut_ = kj::mv(forked);
  return branch;
}

kj::Promise<void> JobRunner::run_cut() {
  // A rollback during the cut bumps the generation: the phase is the recovery's from then on.
  const uint64_t generation = generation_;
  auto done = [this, generation] {
    if (generation == generation_ && phase_ == Phase::kCutting) phase_ = Phase::kRunning;
  };
  return mark_cut(0)
      .then([this](uint64_t target) { return io_.getTimer().timeoutAfter(options_.sync_cut_timeout, backups_.wait_for(target)); })
      .then(kj::cp(done),  // (then() keeps an lvalue functor by reference: copy it)
            [this, done](kj::Exception&& e) {
              done();
              // An abandoned cut must not leave the servers holding.
              servers_.release_holds();
              kj::throwFatalException(kj::mv(e));
            });
}

kj::Promise<uint64_t> JobRunner::mark_cut(int attempt) {
  // Phase 1: where are the servers? Phase 2: back up (and hold) two steps ahead of the furthest
  // chunk. A server whose chunks passed the mark before it arrived refuses it (and says how far
  // it got); then the cut is marked again further ahead, which replaces the holds already set.
  return servers_.versions().then([this, attempt](kj::Array<ServerVersions> versions) {
    uint64_t furthest = 0;
    for (const auto& v : versions) furthest = std::max(furthest, v.highest);
    const uint64_t target = furthest + 2 + static_cast<uint64_t>(attempt);
    PSLOG(kInfo) << "job " << id_ << ": backing up at step " << target << " and holding there";
    return servers_.mark_backup(target).then([this, attempt, target](kj::Array<uint64_t> reached) -> kj::Promise<uint64_t> {
      if (*std::max_element(reached.begin(), reached.end()) <= target) return target;
      KJ_REQUIRE(attempt < 5, "the servers kept running past the cut", target);
      PSLOG(kInfo) << "job " << id_ << ": a server was already past step " << target << "; marking again";
      return mark_cut(attempt + 1);
    });
  });
}

}  // namespace pstrain
