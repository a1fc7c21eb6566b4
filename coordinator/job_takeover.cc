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
// s + 1, a timeout), the job falls back to the rollback of job_recovery.cc.
#include <algorithm>
#include <limits>

#include "common/log.h"
#include "coordinator/job_runner.h"

namespace pstrain {
namespace {

// A survivor takes at most about one step to push the lost slice; this leaves room for a slow one.
constexpr auto kTakeoverTimeout = 30 * kj::SECONDS;

}  // namespace

kj::Promise<WorkerOrder> JobRunner::watch(uint32_t node, uint64_t generation) {
  KJ_REQUIRE(worker_index(node) >= 0, "this node is not a worker of the job", node, id_);
  if (generation != generation_ || state_ != JobState::kRunning) return kj::NEVER_DONE;
  auto paf = kj::newPromiseAndFulfiller<WorkerOrder>();
  watchers_[node] = kj::mv(paf.fulfiller);
  return kj::mv(paf.promise);
}

bool JobRunner::try_take_over(size_t lost, const std::string& why) {
  if (state_ != JobState::kRunning || !configured_ || recovering_ || growing_ || taking_over_ ||
      cutting_ || spec_.training.backup_workers > 0 || workers_.size() < 2) {
    return false;
  }
  bool survivor = false;
  for (size_t i = 0; i < workers_.size(); ++i) {
    const auto it = watchers_.find(workers_[i]);
    const NodeInfo* n = cluster_.find(workers_[i]);
    survivor = survivor || (i != lost && it != watchers_.end() && it->second->isWaiting() && n != nullptr && n->alive);
  }
  if (!survivor) return false;
  taking_over_ = true;
  store_.update(id_, [&](JobRecord& r) { r.reason = why; });
  // recover() does not destroy this promise (it may be running this very callback); a rollback
  // that starts meanwhile bumps the generation, and the takeover's later steps then stand down.
  const uint64_t generation = generation_;
  takeover_ = run_takeover(lost, why).eagerlyEvaluate([this, why, generation](kj::Exception&& e) {
    if (generation != generation_) return;  // superseded by a rollback
    taking_over_ = false;
    PSLOG(kWarning) << "job " << id_ << ": takeover failed (" << e.getDescription().cStr() << "); rolling back";
    recover(why);
  });
  return true;
}

kj::Promise<void> JobRunner::run_takeover(size_t lost, std::string why) {
  // Where are the chunks? The lowest version is the step the lost worker left unfinished.
  kj::Vector<kj::Promise<std::pair<uint64_t, uint64_t>>> probes;
  for (auto& client : server_clients_) {
    auto request = client.backupAtRequest();
    request.setJobId(id_);
    request.setVersion(std::numeric_limits<uint64_t>::max());
    probes.add(request.send().then([](auto&& r) { return std::make_pair(r.getLowestVersion(), r.getCurrentVersion()); }));
  }
  const uint64_t generation = generation_;
  return kj::joinPromises(probes.releaseAsArray())
      .then([this, lost, generation](kj::Array<std::pair<uint64_t, uint64_t>> versions) {
        KJ_REQUIRE(generation == generation_, "superseded by a rollback");
        uint64_t lowest = std::numeric_limits<uint64_t>::max(), highest = 0;
        for (const auto& [low, high] : versions) {
          lowest = std::min(lowest, low);
          highest = std::max(highest, high);
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
        ledger_[lowest][order.slice] = order.indices;
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
        kj::Vector<kj::Promise<void>> settled;
        for (auto& client : server_clients_) {
          auto request = client.settleRequest();
          request.setJobId(id_);
          request.setVersion(lowest + 1);
          request.setGeneration(generation_ + 1);  // the one replan() gives the new plan
          settled.add(request.send().ignoreResult());
        }
        return io_.getTimer()
            .timeoutAfter(kTakeoverTimeout, kj::joinPromises(settled.releaseAsArray()))
            .then([next = lowest + 1] { return next; });
      })
      .then([this, lost, why, generation](uint64_t version) {
        if (generation != generation_) return;  // superseded by a rollback
        taking_over_ = false;
        if (state_ != JobState::kRunning) return;
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
        record_partial_epochs(static_cast<uint32_t>((version - 1) / static_cast<uint64_t>(plan_->steps_per_epoch(0))));
        replan(alive, version, 0,
               "worker " + std::to_string(lost) + "'s slice of step " + std::to_string(version - 1) +
                   " taken over, going on from step " + std::to_string(version));
      });
}

}  // namespace pstrain
