// JobRunner in async mode (DESIGN section 4): backups by consistent cut, where workers resume
// after a rollback to one, and a free worker taking a lost worker's place.
//
// In async mode every push is applied at once, so a chunk's version is the number of pushes it
// has taken, and a worker's step touches every chunk. A backup is consistent when no step is half
// applied: the coordinator asks every worker (through its watch call) to pause between two steps;
// each says where it stands (epoch, step, steps done) and waits. With every worker paused and no
// push in flight, every chunk is at the same version (the job's steps so far), and each server
// backs up its shard as it is (`backupNow`). Then the workers go on. The positions are kept with
// the backup's version, so a recovery restores the servers to it and restarts each worker at its
// recorded position: the steps after the cut are redone, none is skipped or done twice.
//
// Cuts happen when the job's steps (summed over workers, as reported) pass the next multiple of
// `save_freq` (or of the steps of one epoch of all workers, for "epoch"). A cut that does not
// gather every worker within its timeout is abandoned (the workers go on) and tried again at the
// next point; with `max_staleness`, a worker held back by a paused one cannot reach its step
// boundary, so such cuts time out.
#include <algorithm>

#include "common/log.h"
#include "coordinator/job/job_runner.h"

namespace pstrain {
void JobRunner::maybe_cut_async() {
  if (sync() || cut_ || phase_ != Phase::kRunning || spec_.backup.frequency == BackupSpec::Frequency::kNone) {
    return;
  }
  uint64_t interval = 0;
  if (spec_.backup.frequency == BackupSpec::Frequency::kSteps) {
    interval = static_cast<uint64_t>(spec_.backup.steps);
  } else {
    for (uint32_t w = 0; w < workers_.size(); ++w) interval += static_cast<uint64_t>(plan_->steps_per_epoch(w));
  }
  const uint64_t total = progress_.steps_done(false);
  if (next_cut_at_ == 0) next_cut_at_ = (total / interval + 1) * interval;
  if (total < next_cut_at_) return;
  next_cut_at_ = (total / interval + 1) * interval;

  AsyncCut cut;
  cut.id = ++cuts_started_;
  for (size_t i = 0; i < workers_.size(); ++i) {
    const NodeInfo* n = cluster_.find(workers_[i]);
    if (progress_.workers()[i].finished || n == nullptr || !n->alive) continue;
    const auto it = watchers_.find(workers_[i]);
    if (it == watchers_.end() || !it->second->isWaiting()) {
      PSLOG(kDebug) << "job " << id_ << ": worker " << i << " has no open watch; no cut now";
      return;
    }
    cut.expected.insert(workers_[i]);
  }
  if (cut.expected.empty()) return;
  for (uint32_t node : cut.expected) {
    WorkerOrder order;
    order.pause_cut = cut.id;
    watchers_[node]->fulfill(kj::mv(order));
    watchers_.erase(node);
  }
  auto paf = kj::newPromiseAndFulfiller<void>();
  cut.all_paused = kj::mv(paf.fulfiller);
  cut_ = kj::mv(cut);
  PSLOG(kDebug) << "job " << id_ << ": cut " << cut_->id << " at about " << total << " steps: pausing "
                << cut_->expected.size() << " worker(s)";
  cut_task_ = io_.getTimer()
                  .timeoutAfter(options_.async_cut_timeout, kj::mv(paf.promise))
                  .then([this] { return run_async_cut(); })
                  .then([this] { end_async_cut(); },
                        [this](kj::Exception&& e) {
                          PSLOG(kWarning) << "job " << id_ << ": backup cut abandoned: " << e.getDescription().cStr();
                          end_async_cut();
                        })
                  .eagerlyEvaluate(nullptr);
}

kj::Promise<void> JobRunner::paused(uint32_t node, uint64_t cut, Position position) {
  KJ_REQUIRE(worker_index(node).has_value(), "this node is not a worker of the job", node, id_);
  if (!cut_ || cut_->id != cut || cut_->expected.count(node) == 0) return kj::READY_NOW;  // a cut that ended
  cut_->expected.erase(node);
  cut_->positions[node] = position;
  auto paf = kj::newPromiseAndFulfiller<void>();
  cut_->resumes.push_back(kj::mv(paf.fulfiller));
  if (cut_->expected.empty()) cut_->all_paused->fulfill();
  return kj::mv(paf.promise);
}

void JobRunner::cut_expects_no_more(uint32_t node) {
  if (!cut_ || cut_->expected.erase(node) == 0) return;
  if (cut_->expected.empty()) cut_->all_paused->fulfill();
}

kj::Promise<void> JobRunner::run_async_cut() {
  // Every worker finished meanwhile (or a rollback ended the cut): nothing left to protect.
  if (!cut_ || phase_ != Phase::kRunning || cut_->positions.empty()) return kj::READY_NOW;
  // Positions by worker index: a paused worker where it stands; one that finished at the end of
  // its shard, so a recovery does not restart it; a lost one at its last reported step, where a
  // replacement would go on.
  std::vector<Position> positions(workers_.size());
  uint64_t version = 0;  // the job's steps at the cut: the backup's name
  for (size_t i = 0; i < workers_.size(); ++i) {
    const auto it = cut_->positions.find(workers_[i]);
    if (it != cut_->positions.end()) {
      positions[i] = it->second;
      version += it->second.steps_done;
    } else if (const WorkerProgress& w = progress_.workers()[i]; w.lost) {
      const auto spe = static_cast<uint64_t>(plan_->steps_per_epoch(static_cast<uint32_t>(i)));
      positions[i] = {static_cast<uint32_t>(w.steps / spe), w.steps % spe, w.steps};
      version += w.steps;
    } else {
      positions[i].epoch = static_cast<uint32_t>(spec_.training.epochs);
      positions[i].steps_done = w.steps;
      version += w.steps;
    }
  }
  PSLOG(kInfo) << "job " << id_ << ": consistent cut at step " << version << " (" << cut_->positions.size()
               << " worker(s) paused); backing up";
  cut_positions_[version] = kj::mv(positions);
  while (cut_positions_.size() > 4) cut_positions_.erase(cut_positions_.begin());
  return servers_.backup_now(version);
}

void JobRunner::end_async_cut() {
  if (!cut_) return;
  for (auto& resume : cut_->resumes) resume->fulfill();
  cut_.reset();
}

size_t JobRunner::async_resume(const std::vector<uint32_t>& workers, uint64_t version) {
  // Each worker goes back to where it stood at the cut whose backup was restored. With another
  // worker count the shards are cut differently, so all start at the earliest epoch among them.
  resume_positions_.assign(workers.size(), Position{});
  if (version == 0) return 0;
  const auto it = cut_positions_.find(version);
  KJ_REQUIRE(it != cut_positions_.end(), "no worker positions recorded for the backup", version);
  if (it->second.size() == workers.size()) {
    resume_positions_ = it->second;
  } else {
    uint32_t earliest = UINT32_MAX;
    for (const Position& p : it->second) earliest = std::min(earliest, p.epoch);
    for (Position& p : resume_positions_) {
      p.epoch = earliest;
      p.steps_done = 0;
    }
  }
  uint32_t earliest = UINT32_MAX;
  for (const Position& p : resume_positions_) earliest = std::min(earliest, p.epoch);
  return earliest;
}

void JobRunner::replace_lost_async_worker() {
  if (phase_ != Phase::kRunning || cut_) return;
  auto& progress = progress_.workers();
  for (size_t i = 0; i < workers_.size(); ++i) {
    if (!progress[i].lost) continue;
    const std::vector<uint32_t> free = cluster_.free_nodes(proto::Role::WORKER);
    if (free.empty()) return;
    // The new worker goes on with the lost one's shard from its last reported step: at most the
    // steps since that report are done twice, none is skipped. The other workers' sessions are
    // untouched (same plan, same generation).
    const uint32_t node = free.front();
    cluster_.find(node)->job = id_;
    workers_[i] = node;
    progress[i].lost = false;
    progress[i].finished = false;
    const auto steps_per_epoch = static_cast<uint64_t>(plan_->steps_per_epoch(static_cast<uint32_t>(i)));
    if (resume_positions_.size() != workers_.size()) {
      resume_positions_.resize(workers_.size());
      for (size_t w = 0; w < workers_.size(); ++w) {
        const auto spe = static_cast<uint64_t>(plan_->steps_per_epoch(static_cast<uint32_t>(w)));
        resume_positions_[w] = {static_cast<uint32_t>(progress[w].steps / spe), progress[w].steps % spe, progress[w].steps};
      }
    }
    resume_positions_[i] = {static_cast<uint32_t>(progress[i].steps / steps_per_epoch),
                            progress[i].steps % steps_per_epoch, progress[i].steps};
    PSLOG(kInfo) << "job " << id_ << ": worker node " << node << " takes the place of lost worker " << i
                 << " from its step " << progress[i].steps;
    store_.update(id_, [&](JobRecord& r) {
      r.workers = workers_;
      r.notes.push_back("a new worker took the place of lost worker " + std::to_string(i) + " from its step " +
                        std::to_string(progress[i].steps));
    });
  }
}

}  // namespace pstrain
