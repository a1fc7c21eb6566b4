// SyncCut (docs/DESIGN-NOTES.md "Preemption"): every server backs up at one step just ahead and
// holds there, so the job can be re-planned from that step with nothing replayed. A preemption
// notice (SIGTERM on a node) and a worker joining a job that runs short of workers both use one.
//
// The mark must reach every server before its chunks pass the step: the coordinator asks where
// the servers are and marks two steps ahead of the furthest chunk; a server already past the
// mark refuses it, and the cut is marked again further ahead (which replaces the holds already
// set). A cut that does not complete within 30 s is abandoned and its holds released. With
// compression state on the workers the cut must also be announced before the step ahead of it
// (mark() says how).
#include "coordinator/job/sync_cut.h"

#include <algorithm>

#include "common/base/log.h"

namespace pstrain {

SyncCut::SyncCut(JobContext& job) : job_(job) {}

kj::Promise<void> SyncCut::cut() {
  // One cut at a time: a preemption during a cut waits for that cut's backup, which is just as
  // good. A cut is for a running sync job only; during a takeover, a recovery or the
  // configuration there is nothing to hold (the node's loss is handled as a loss).
  KJ_IF_MAYBE(running, running_) {
    if (job_.phase == JobPhase::kCutting) return running->addBranch();
  }
  if (job_.phase != JobPhase::kRunning || !job_.sync()) return kj::READY_NOW;
  job_.phase = JobPhase::kCutting;
  auto forked = run().fork();
  auto branch = forked.addBranch();
  running_ = kj::mv(forked);
  return branch;
}

kj::Promise<void> SyncCut::run() {
  // A rollback during the cut bumps the generation: the phase is the recovery's from then on.
  const uint64_t generation = job_.generation;
  auto done = [this, generation] {
    if (generation == job_.generation && job_.phase == JobPhase::kCutting) job_.phase = JobPhase::kRunning;
  };
  return mark(0)
      .then([this](uint64_t target) {
        return job_.io.getTimer().timeoutAfter(job_.options.sync_cut_timeout, job_.backups.wait_for(target));
      })
      .then(kj::cp(done),  // (then() keeps an lvalue functor by reference: copy it)
            [this, done](kj::Exception&& e) {
              done();
              // An abandoned cut must not leave the servers holding.
              job_.servers.release_holds();
              kj::throwFatalException(kj::mv(e));
            });
}

kj::Promise<uint64_t> SyncCut::mark(int attempt) {
  // Phase 1: where are the servers? Phase 2: back up (and hold) two steps ahead of the furthest
  // chunk. A server whose chunks passed the mark before it arrived refuses it (and says how far
  // it got); then the cut is marked again further ahead, which replaces the holds already set.
  //
  // With compression state on the workers (topk, powersgd), the push of step target - 1 must
  // carry each worker's state, and a worker learns of the cut from the replies that bring version
  // target - 1 (PushResults.cutAt): so no chunk may have reached target - 1 when the mark is
  // set, and the cut goes two steps further ahead to leave room for that.
  const uint64_t lead = job_.spec.training.compression.keeps_worker_state() ? 2 : 0;
  return job_.servers.versions().then([this, attempt, lead](kj::Array<ServerVersions> versions) {
    uint64_t furthest = 0;
    for (const auto& v : versions) furthest = std::max(furthest, v.highest);
    const uint64_t target = furthest + 2 + lead + static_cast<uint64_t>(attempt);
    PSLOG(kInfo) << "job " << job_.id << ": backing up at step " << target << " and holding there";
    return job_.servers.mark_backup(target).then([this, attempt, target, lead](kj::Array<uint64_t> reached) -> kj::Promise<uint64_t> {
      if (*std::max_element(reached.begin(), reached.end()) + lead <= target) return target;
      KJ_REQUIRE(attempt < 5, "the servers kept running past the cut", target);
      PSLOG(kInfo) << "job " << job_.id << ": a server was already at step " << *std::max_element(reached.begin(), reached.end())
                   << ", too close to " << target << "; marking again";
      return mark(attempt + 1);
    });
  });
}

}  // namespace pstrain
