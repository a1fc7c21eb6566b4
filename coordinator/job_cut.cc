// JobRunner's cuts (DESIGN section 4): every server backs up at one step just ahead and holds
// there, so the job can be re-planned from that step with nothing replayed. A preemption notice
// (SIGTERM on a node) and a worker joining a job that runs short of workers both use one.
//
// The mark must reach every server before its chunks pass the step: the coordinator asks where
// the servers are and marks two steps ahead of the furthest chunk; a server already past the
// mark refuses it, and the cut is marked again further ahead (which replaces the holds already
// set). A cut that does not complete within 30 s is abandoned and its holds released.
#include <algorithm>
#include <limits>

#include "common/log.h"
#include "coordinator/job_runner.h"

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
  if (state_ != JobState::kRunning || !configured_ || growing_ ||
      workers_.size() >= static_cast<size_t>(spec_.training.workers) ||
      cluster_.free_nodes(proto::Role::WORKER).empty()) {
    return;
  }
  // A worker is free and the job runs short of workers: cut at the next step (backup and hold,
  // as for a preemption) and re-plan from that very step with one more worker. Nothing is
  // replayed.
  growing_ = true;
  PSLOG(kInfo) << "job " << id_ << ": a free worker can join; re-planning at the next step";
  grow_ = cut()
              .then([this] {
                growing_ = false;
                recover("a worker joins");
              })
              .eagerlyEvaluate([this](kj::Exception&& e) {
                growing_ = false;
                PSLOG(kWarning) << "job " << id_ << ": could not add a worker: " << e.getDescription().cStr();
              });
}

kj::Promise<void> JobRunner::cut() {
  if (state_ != JobState::kRunning || !sync() || !configured_) return kj::READY_NOW;
  cutting_ = true;
  return mark_cut(0)
      .then([this](uint64_t target) { return io_.getTimer().timeoutAfter(30 * kj::SECONDS, wait_for_backup(target)); })
      .then([this] { cutting_ = false; },
            [this](kj::Exception&& e) {
              cutting_ = false;
              // An abandoned cut must not leave the servers holding.
              for (auto& client : server_clients_) {
                auto request = client.releaseHoldRequest();
                request.setJobId(id_);
                request.send().detach([](kj::Exception&&) {});
              }
              kj::throwFatalException(kj::mv(e));
            });
}

kj::Promise<uint64_t> JobRunner::mark_cut(int attempt) {
  // Phase 1: where are the servers? Phase 2: back up (and hold) two steps ahead of the furthest
  // chunk. A server whose chunks passed the mark before it arrived refuses it (and says how far
  // it got); then the cut is marked again further ahead, which replaces the holds already set.
  kj::Vector<kj::Promise<uint64_t>> probes;
  for (auto& client : server_clients_) {
    auto request = client.backupAtRequest();
    request.setJobId(id_);
    request.setVersion(std::numeric_limits<uint64_t>::max());
    probes.add(request.send().then([](auto&& r) { return r.getCurrentVersion(); }));
  }
  return kj::joinPromises(probes.releaseAsArray()).then([this, attempt](kj::Array<uint64_t> versions) {
    const uint64_t target = *std::max_element(versions.begin(), versions.end()) + 2 + static_cast<uint64_t>(attempt);
    PSLOG(kInfo) << "job " << id_ << ": backing up at step " << target << " and holding there";
    kj::Vector<kj::Promise<uint64_t>> marks;
    for (auto& client : server_clients_) {
      auto request = client.backupAtRequest();
      request.setJobId(id_);
      request.setVersion(target);
      marks.add(request.send().then([](auto&& r) { return r.getCurrentVersion(); }));
    }
    return kj::joinPromises(marks.releaseAsArray())
        .then([this, attempt, target](kj::Array<uint64_t> reached) -> kj::Promise<uint64_t> {
          if (*std::max_element(reached.begin(), reached.end()) <= target) return target;
          KJ_REQUIRE(attempt < 5, "the servers kept running past the cut", target);
          PSLOG(kInfo) << "job " << id_ << ": a server was already past step " << target << "; marking again";
          return mark_cut(attempt + 1);
        });
  });
}

}  // namespace pstrain
