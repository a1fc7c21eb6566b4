// AsyncCuts: async mode (docs/DESIGN-NOTES.md "Async mode: a consistent cut"): backups by
// consistent cut, where workers resume after a rollback to one, and a free worker taking a lost
// worker's place.
//
// In async mode every push is applied at once, so a chunk's version is the number of pushes it
// has taken, and a worker's step touches every chunk. A backup is consistent when no step is half
// applied: the coordinator asks every worker (through its watch call) to pause between two steps;
// each says where it stands (epoch, step, steps done) and waits. With every worker paused and no
// push in flight, every chunk is at the same version (the job's steps so far), and each server
// backs up its shard as it is (`backupNow`). Then the workers go on. The positions are kept with
// the backup's version, so a recovery restores the servers to it and restarts each worker at its
// recorded position: the steps after the cut are redone, none is skipped or done twice. The
// positions are stored in the JobStore too, before the servers back up, so a restarted
// coordinator does the same from the newest complete cut (JobStartup::resume_async).
//
// Cuts happen when the job's steps (summed over workers, as reported) pass the next multiple of
// `save_freq` (or of the steps of one epoch of all workers, for "epoch"). A cut that does not
// gather every worker within its timeout is abandoned (the workers go on) and tried again at the
// next point; with `max_staleness`, a worker held back by a paused one cannot reach its step
// boundary, so such cuts time out.
#include "coordinator/job/async_cuts.h"

#include <algorithm>

#include "common/base/log.h"

namespace pstrain {

AsyncCuts::AsyncCuts(JobContext& job) : job_(job) {}

void AsyncCuts::maybe_start() {
  const JobSpec& spec = job_.spec;
  if (job_.sync() || cut_ || job_.phase != JobPhase::kRunning || spec.backup.frequency == BackupSpec::Frequency::kNone) {
    return;
  }
  uint64_t interval = 0;
  if (spec.backup.frequency == BackupSpec::Frequency::kSteps) {
    interval = static_cast<uint64_t>(spec.backup.steps);
  } else {
    for (uint32_t w = 0; w < job_.workers.size(); ++w) interval += static_cast<uint64_t>(job_.plan->steps_per_epoch(w));
  }
  const uint64_t total = job_.progress.steps_done(false);
  if (next_cut_at_ == 0) next_cut_at_ = (total / interval + 1) * interval;
  if (total < next_cut_at_) return;
  next_cut_at_ = (total / interval + 1) * interval;

  Cut cut;
  cut.id = ++cuts_started_;
  for (size_t i = 0; i < job_.workers.size(); ++i) {
    const NodeId node = job_.workers[i];
    if (job_.progress.workers()[i].finished || !job_.alive(node)) continue;
    if (!job_.can_order(node)) {
      PSLOG(kDebug) << "job " << job_.id << ": worker " << i << " has no open watch; no cut now";
      return;
    }
    cut.expected.insert(node);
  }
  if (cut.expected.empty()) return;
  for (NodeId node : cut.expected) {
    WorkerOrder order;
    order.pause_cut = cut.id;
    job_.watches.order(node, kj::mv(order));
  }
  auto paf = kj::newPromiseAndFulfiller<void>();
  cut.all_paused = kj::mv(paf.fulfiller);
  cut_ = kj::mv(cut);
  PSLOG(kDebug) << "job " << job_.id << ": cut " << cut_->id << " at about " << total << " steps: pausing "
                << cut_->expected.size() << " worker(s)";
  task_ = job_.io.getTimer()
              .timeoutAfter(job_.options.async_cut_timeout, kj::mv(paf.promise))
              .then([this] { return run(); })
              .then([this] { end(); },
                    [this](kj::Exception&& e) {
                      PSLOG(kWarning) << "job " << job_.id << ": backup cut abandoned: " << e.getDescription().cStr();
                      end();
                    })
              .eagerlyEvaluate(nullptr);
}

kj::Promise<void> AsyncCuts::paused(NodeId node, uint64_t cut, WorkerPosition position) {
  if (!cut_ || cut_->id != cut || cut_->expected.count(node) == 0) return kj::READY_NOW;  // a cut that ended
  cut_->expected.erase(node);
  cut_->positions[node] = position;
  auto paf = kj::newPromiseAndFulfiller<void>();
  cut_->resumes.push_back(kj::mv(paf.fulfiller));
  if (cut_->expected.empty()) cut_->all_paused->fulfill();
  return kj::mv(paf.promise);
}

void AsyncCuts::expects_no_more(NodeId node) {
  if (!cut_ || cut_->expected.erase(node) == 0) return;
  if (cut_->expected.empty()) cut_->all_paused->fulfill();
}

kj::Promise<void> AsyncCuts::run() {
  // Every worker finished meanwhile (or a rollback ended the cut): nothing left to protect.
  if (!cut_ || job_.phase != JobPhase::kRunning || cut_->positions.empty()) return kj::READY_NOW;
  // Positions by worker index: a paused worker where it stands; one that finished at the end of
  // its shard, so a recovery does not restart it; a lost one at its last reported step, where a
  // replacement would go on.
  std::vector<WorkerPosition> positions(job_.workers.size());
  uint64_t version = 0;  // the job's steps at the cut: the backup's name
  for (size_t i = 0; i < job_.workers.size(); ++i) {
    const WorkerProgress& w = job_.progress.workers()[i];
    if (const auto it = cut_->positions.find(job_.workers[i]); it != cut_->positions.end()) {
      positions[i] = it->second;
    } else if (w.lost) {
      positions[i] = position_of(i);
    } else {
      positions[i].epoch = static_cast<uint32_t>(job_.spec.training.epochs);
      positions[i].steps_done = w.steps;
    }
    version += positions[i].steps_done;
  }
  std::string where;
  for (size_t i = 0; i < positions.size(); ++i) {
    where += (i ? ", " : "") + std::to_string(i) + ": epoch " + std::to_string(positions[i].epoch + 1) + " step " +
             std::to_string(positions[i].step) + " (" + std::to_string(positions[i].steps_done) + " done)";
  }
  PSLOG(kInfo) << "job " << job_.id << ": consistent cut at step " << version << " (" << cut_->positions.size()
               << " worker(s) paused; workers " << where << "); backing up";
  std::vector<uint64_t> dropped;
  positions_[version] = positions;
  while (positions_.size() > 4) {
    dropped.push_back(positions_.begin()->first);
    positions_.erase(positions_.begin());
  }
  // The positions are on disk before any server backs up (the workers wait the write too): a
  // restarted coordinator finds the positions of every cut the servers hold.
  //
  // A recovery that begins during the write ends this cut (JobFaults::recover) and may already
  // have put a restarted server in the group, configured but not yet restored: its shard is not
  // the job's state at the cut, so such a backup would be a wrong one that a rollback could pick.
  // The cut asks for no backup then (it is abandoned, and the recovery goes on as it would).
  const uint64_t id = cut_->id, generation = job_.generation;
  kj::Promise<void> stored = job_.store.set_async_cut(job_.id, version, kj::mv(positions), dropped);
  if (job_.options.async_cut_backup_delay > 0 * kj::SECONDS) {
    stored = stored.then([this] { return job_.io.getTimer().afterDelay(job_.options.async_cut_backup_delay); });
  }
  return stored.then([this, version, id, generation] {
    KJ_REQUIRE(cut_.has_value() && cut_->id == id && job_.generation == generation && job_.phase == JobPhase::kRunning,
               "a recovery began during the cut", version);
    return job_.servers.backup_now(version);
  });
}

void AsyncCuts::end() {
  if (!cut_) return;
  for (auto& resume : cut_->resumes) resume->fulfill();
  cut_.reset();
}

void AsyncCuts::abandon(const std::string& why) {
  if (!cut_) return;
  for (auto& resume : cut_->resumes) {
    resume->reject(KJ_EXCEPTION(FAILED, "the job is recovering: this session is stale", why));
  }
  cut_.reset();
}

WorkerPosition AsyncCuts::position_of(size_t worker) const {
  const uint64_t steps = job_.progress.workers()[worker].steps;
  const auto spe = static_cast<uint64_t>(job_.plan->steps_per_epoch(static_cast<uint32_t>(worker)));
  return {static_cast<uint32_t>(steps / spe), steps % spe, steps};
}

size_t AsyncCuts::resume(const std::vector<NodeId>& workers, uint64_t version) {
  // Each worker goes back to where it stood at the cut whose backup was restored. With another
  // worker count the shards are cut differently, so all start at the earliest epoch among them.
  auto& resume = job_.resume_positions;
  resume.assign(workers.size(), WorkerPosition{});
  next_cut_at_ = 0;
  if (version == 0) return 0;
  const auto it = positions_.find(version);
  KJ_REQUIRE(it != positions_.end(), "no worker positions recorded for the backup", version);
  if (it->second.size() == workers.size()) {
    resume = it->second;
  } else {
    uint32_t earliest = UINT32_MAX;
    for (const WorkerPosition& p : it->second) earliest = std::min(earliest, p.epoch);
    for (WorkerPosition& p : resume) {
      p.epoch = earliest;
      p.steps_done = 0;
    }
  }
  uint32_t earliest = UINT32_MAX;
  for (const WorkerPosition& p : resume) earliest = std::min(earliest, p.epoch);
  return earliest;
}

void AsyncCuts::replace_lost_workers() {
  if (job_.phase != JobPhase::kRunning || cut_) return;
  auto& progress = job_.progress.workers();
  for (size_t i = 0; i < job_.workers.size(); ++i) {
    if (!progress[i].lost) continue;
    const std::vector<NodeId> free = job_.cluster.free_nodes(proto::Role::WORKER);
    if (free.empty()) return;
    // The new worker goes on with the lost one's shard from its last reported step: at most the
    // steps since that report are done twice, none is skipped. The other workers' sessions are
    // untouched (same plan, same generation).
    const NodeId node = free.front();
    job_.cluster.find(node)->job = job_.id;
    job_.workers[i] = node;
    progress[i].lost = false;
    progress[i].finished = false;
    if (job_.resume_positions.size() != job_.workers.size()) {
      job_.resume_positions.resize(job_.workers.size());
      for (size_t w = 0; w < job_.workers.size(); ++w) job_.resume_positions[w] = position_of(w);
    }
    job_.resume_positions[i] = position_of(i);
    PSLOG(kInfo) << "job " << job_.id << ": worker node " << node << " takes the place of lost worker " << i
                 << " from its step " << progress[i].steps;
    job_.store.update(job_.id, [&](JobRecord& r) {
      r.workers = node_numbers(job_.workers);
      r.notes.push_back("a new worker took the place of lost worker " + std::to_string(i) + " from its step " +
                        std::to_string(progress[i].steps));
    });
  }
}

}  // namespace pstrain
