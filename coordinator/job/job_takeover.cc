// JobRunner's answer to a lost worker in sync mode (DESIGN section 4): the job goes on from the
// next step, nothing rolled back.
//
// When a worker dies during step s, the chunks whose pushes for s were all in are at s + 1, the
// others wait at s for the lost worker's slice (its open pushes were cancelled with its
// connection). A survivor still holds the parameters of version s (it swaps in the new values only
// once its whole step is in), so it can compute the lost slice of step s and push it in the lost
// worker's name: the step completes with exactly the sum an uninterrupted run would have applied
// (pushes already applied make the substitute a dropped late push). Meanwhile every server holds
// at s + 1 (`settle`); once all chunks are there, the pushes waiting beyond are failed, the
// workers ask for the new plan, and the job re-plans from s + 1 with one worker fewer. Every
// example is still used once per epoch, and no step is replayed.
//
// When that cannot work (backup workers, no survivor with an open watch, a chunk already past
// s + 1, JobOptions::takeover_timeout), the job falls back to the rollback of job_recovery.cc.
#include <algorithm>
#include <limits>

#include "common/log.h"
#include "coordinator/job/job_runner.h"

namespace pstrain {

kj::Promise<WorkerOrder> JobRunner::watch(uint32_t node, uint64_t generation) {
  KJ_REQUIRE(worker_index(node).has_value(), "this node is not a worker of the job", node, id_);
  if (generation != generation_ || state() != JobState::kRunning) return kj::NEVER_DONE;
  auto paf = kj::newPromiseAndFulfiller<WorkerOrder>();
  watchers_[node] = kj::mv(paf.fulfiller);
  return kj::mv(paf.promise);
}

bool JobRunner::try_take_over(size_t lost, const std::string& why) {
  if (phase_ != Phase::kRunning || spec_.training.backup_workers > 0 || workers_.size() < 2) return false;
  bool survivor = false;
  for (size_t i = 0; i < workers_.size(); ++i) {
    const auto it = watchers_.find(workers_[i]);
    const NodeInfo* n = cluster_.find(workers_[i]);
    survivor = survivor || (i != lost && it != watchers_.end() && it->second->isWaiting() && n != nullptr && n->alive);
  }
  if (!survivor) return false;
  phase_ = Phase::kTakingOver;
  store_.update(id_, [&](JobRecord& r) { r.reason = why; });
  // recover() does not destroy this promise (it may be running this very callback); a rollback
  // that starts meanwhile bumps the generation, and the takeover's later steps then stand down.
  const uint64_t generation = generation_;
  takeover_ = run_takeover(lost, why).eagerlyEvaluate([this, why, generation](kj::Exception&& e) {
    if (generation != generation_) return;  // superseded by a rollback
    PSLOG(kWarning) << "job " << id_ << ": takeover failed (" << e.getDescription().cStr() << "); rolling back";
    recover(why);
  });
  return true;
}

kj::Promise<void> JobRunner::run_takeover(size_t lost, std::string why) {
  // Where are the chunks? The lowest version is the step the lost worker left unfinished.
  const uint64_t generation = generation_;
  return servers_.versions()
      .then([this, lost, generation](kj::Array<ServerVersions> versions) {
        KJ_REQUIRE(generation == generation_, "superseded by a rollback");
        uint64_t lowest = std::numeric_limits<uint64_t>::max(), highest = 0;
        for (const auto& v : versions) {
          lowest = std::min(lowest, v.lowest);
          highest = std::max(highest, v.highest);
        }
        const auto steps_per_epoch = static_cast<uint64_t>(plan_->steps_per_epoch(0));
        const uint64_t total = steps_per_epoch * static_cast<uint64_t>(spec_.training.epochs);
        KJ_REQUIRE(lowest < total, "the lost worker had finished its steps");
        KJ_REQUIRE(highest <= lowest + 1, "chunks are more than one step apart", lowest, highest);
        WorkerOrder order;
        order.step = lowest;
        order.slice = static_cast<uint32_t>(lost);
        order.slice_count = static_cast<uint32_t>(workers_.size());
        order.epoch = static_cast<uint32_t>(lowest / steps_per_epoch);
        order.step_in_epoch = static_cast<int64_t>(lowest % steps_per_epoch);
        order.indices = plan_->batch(order.epoch, order.step_in_epoch, order.slice);
        order.split = train_;
        progress_.served(lowest, order.slice, order.indices);
        // The first live survivor with an open watch computes the slice.
        bool ordered = false;
        for (size_t i = 0; i < workers_.size(); ++i) {
          const auto it = watchers_.find(workers_[i]);
          const NodeInfo* n = cluster_.find(workers_[i]);
          if (i == lost || it == watchers_.end() || !it->second->isWaiting() || n == nullptr || !n->alive) continue;
          PSLOG(kInfo) << "job " << id_ << ": worker " << i << " takes over worker " << lost << "'s slice of step "
                       << lowest;
          it->second->fulfill(kj::mv(order));
          watchers_.erase(it);
          ordered = true;
          break;
        }
        KJ_REQUIRE(ordered, "no surviving worker to take the slice over");
        // Every server holds at the next step; when all chunks are there, the job re-plans from it.
        store_.update(id_, [&](JobRecord& r) { r.generation = std::max(r.generation, generation_ + 1); });
        return io_.getTimer()
            .timeoutAfter(options_.takeover_timeout, servers_.settle(lowest + 1, generation_ + 1))  // replan()'s generation
            .then([next = lowest + 1] { return next; });
      })
      .then([this, lost, why, generation](uint64_t version) {
        if (generation != generation_ || phase_ != Phase::kTakingOver) return;  // superseded, cancelled or failed
        std::vector<uint32_t> alive;
        for (size_t i = 0; i < workers_.size(); ++i) {
          const NodeInfo* n = cluster_.find(workers_[i]);
          if (i != lost && n != nullptr && n->alive) alive.push_back(workers_[i]);
        }
        if (alive.empty()) {
          recover(why);
          return;
        }
        // An epoch whose evaluation the lost worker did not report: record what the others did.
        // (Epochs before the one of the taken-over step: the survivors evaluated those before
        // they pushed that step.)
        progress_.record_partial_epochs(static_cast<uint32_t>((version - 1) / static_cast<uint64_t>(plan_->steps_per_epoch(0))));
        replan(alive, version, 0,
               "worker " + std::to_string(lost) + "'s slice of step " + std::to_string(version - 1) +
                   " taken over, going on from step " + std::to_string(version));
      });
}

}  // namespace pstrain
