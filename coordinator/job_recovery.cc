// JobRunner's backups and recovery (DESIGN section 4): which steps are complete backups, what a
// lost node means for the job, and the rollback and re-plan. (Cuts: job_cut.cc; a lost sync
// worker's takeover: job_takeover.cc; async mode: job_async_cut.cc; moving a lost server's shard:
// job_server_move.cc.)
//
// A rollback: every server goes back to the latest backup that all of
// them hold intact (or to the initial parameters), the workers that are alive get new
// assignments starting at that step, and training goes on. Because a sync run is deterministic
// (fixed data order, slice-ordered sums), the result equals an uninterrupted run when the worker
// count is unchanged.
#include <algorithm>
#include <limits>
#include <set>

#include "common/log.h"
#include "coordinator/job_runner.h"

namespace pstrain {
namespace {

// How long a lost server has to come back (same name) before the job fails.
constexpr auto kServerReturnTimeout = 120 * kj::SECONDS;

}  // namespace

bool JobRunner::uses_node(uint32_t node) const {
  return std::find(servers_.begin(), servers_.end(), node) != servers_.end() ||
         std::find(workers_.begin(), workers_.end(), node) != workers_.end();
}

void JobRunner::on_backup_done(uint32_t node, uint64_t version) {
  const auto it = std::find(servers_.begin(), servers_.end(), node);
  if (it == servers_.end() || state_ == JobState::kSucceeded) return;
  auto& acks = backup_acks_[version];
  acks.insert(static_cast<size_t>(it - servers_.begin()));
  if (acks.size() < servers_.size()) return;
  backup_acks_.erase(backup_acks_.begin(), backup_acks_.upper_bound(version));
  if (complete_backups_.empty() || complete_backups_.back() < version) complete_backups_.push_back(version);
  while (complete_backups_.size() > 2) complete_backups_.erase(complete_backups_.begin());
  PSLOG(kInfo) << "job " << id_ << ": backup at step " << version << " complete on all " << servers_.size()
               << " server(s)";
  store_.update(id_, [&](JobRecord& r) { r.last_backup_step = static_cast<int64_t>(version); });
  resolve_backup_waiters();
}

void JobRunner::resolve_backup_waiters() {
  for (auto& [version, fulfiller] : backup_waiters_) {
    if (!complete_backups_.empty() && complete_backups_.back() >= version) fulfiller->fulfill();
  }
  std::erase_if(backup_waiters_, [](auto& w) { return !w.second->isWaiting(); });
}

kj::Promise<void> JobRunner::wait_for_backup(uint64_t version) {
  if (!complete_backups_.empty() && complete_backups_.back() >= version) return kj::READY_NOW;
  auto paf = kj::newPromiseAndFulfiller<void>();
  backup_waiters_.emplace_back(version, kj::mv(paf.fulfiller));
  return kj::mv(paf.promise);
}

void JobRunner::on_node_lost(uint32_t node, const std::string& why) {
  if (state_ != JobState::kRunning && state_ != JobState::kRecovering) return;
  const bool is_worker = std::find(workers_.begin(), workers_.end(), node) != workers_.end();
  if (!sync()) {
    if (is_worker) {
      // Async: the others simply go on; the lost worker's shard of the epoch is not redone.
      const auto index = static_cast<size_t>(std::find(workers_.begin(), workers_.end(), node) - workers_.begin());
      worker_finished_[index] = true;
      worker_lost_[index] = true;
      cut_expects_no_more(node);
      PSLOG(kWarning) << "job " << id_ << ": worker " << index << " lost (" << why
                      << "); the others go on, and a free worker takes its place";
      for (auto& client : server_clients_) {
        auto request = client.workerFinishedRequest();
        request.setJobId(id_);
        request.setWorker(static_cast<uint32_t>(index));
        request.send().detach([](kj::Exception&&) {});
      }
      finish_if_done();
      return;
    }
  }
  if (is_worker) {
    const auto index = static_cast<size_t>(std::find(workers_.begin(), workers_.end(), node) - workers_.begin());
    // A preempted worker left after a cut (servers hold at a backup): rolling back to it loses
    // nothing, and a takeover could not pass the hold.
    if (preempted_.count(node) == 0 && try_take_over(index, why)) return;
  }
  recover(why);
}

void JobRunner::recover(const std::string& why) {
  if (state_ != JobState::kRunning && state_ != JobState::kRecovering) return;
  // A rollback supersedes a takeover or a cut in progress. Their promises stay (this may run
  // inside one of their callbacks); the generation bump below makes a takeover stand down.
  taking_over_ = false;
  end_async_cut();
  ++generation_;  // every session of the old plan is stale from now on
  if (recovering_) return;  // the running recovery picks up the new losses
  recovering_ = true;
  state_ = JobState::kRecovering;
  configured_ = false;
  store_.update(id_, [&](JobRecord& r) {
    r.state = "RECOVERING";
    r.reason = why;
  });
  PSLOG(kWarning) << "job " << id_ << ": RECOVERING (" << why << ")";
  recovery_ = run_recovery(why).eagerlyEvaluate([this](kj::Exception&& e) {
    recovering_ = false;
    fail(std::string("recovery failed: ") + e.getDescription().cStr());
  });
}

kj::Promise<void> JobRunner::wait_for_servers(kj::TimePoint since, kj::TimePoint deadline) {
  // A server is back when a live node carries its name: the same process, or a restart of it
  // (same name, same data directory, so the same backups).
  std::vector<size_t> replaced;
  bool missing = false;
  for (size_t i = 0; i < servers_.size(); ++i) {
    const NodeInfo* current = cluster_.find(servers_[i]);
    if (current != nullptr && current->alive) continue;
    bool found = false;
    for (uint32_t candidate : cluster_.free_nodes(proto::Role::SERVER)) {
      NodeInfo* n = cluster_.find(candidate);
      if (n->name == server_names_[i]) {
        n->job = id_;
        servers_[i] = candidate;
        server_addresses_[i] = n->address;
        replaced.push_back(i);
        found = true;
        break;
      }
    }
    missing = missing || !found;
  }
  kj::Vector<kj::Promise<void>> reconnects;
  for (size_t i : replaced) {
    PSLOG(kInfo) << "job " << id_ << ": server '" << server_names_[i] << "' is back at " << server_addresses_[i];
    reconnects.add(connect_server(i).then([this, i] { return configure_server(i); }));
  }
  auto reconnected = kj::joinPromises(reconnects.releaseAsArray());
  if (!missing) return reconnected;
  return reconnected.then([this, since, deadline]() -> kj::Promise<void> {
    if (io_.getTimer().now() >= deadline) {
      std::string names;
      for (size_t i = 0; i < servers_.size(); ++i) {
        const NodeInfo* n = cluster_.find(servers_[i]);
        if (n == nullptr || !n->alive) names += (names.empty() ? "" : ", ") + server_names_[i];
      }
      return KJ_EXCEPTION(FAILED, "server(s) did not come back in time", names);
    }
    // Past the move delay, a free server can take a missing server's place from its replica.
    if (io_.getTimer().now() >= since + recovery_options_.move_lost_server_after) {
      KJ_IF_MAYBE(moving, move_lost_servers()) {
        return moving->then([this, since, deadline] { return wait_for_servers(since, deadline); });
      }
    }
    return io_.getTimer().afterDelay(200 * kj::MILLISECONDS).then([this, since, deadline] {
      return wait_for_servers(since, deadline);
    });
  });
}

kj::Promise<uint64_t> JobRunner::restore_servers(std::vector<uint64_t> candidates) {
  // Recorded before any server sees it: a coordinator restarted later starts past it.
  store_.update(id_, [&](JobRecord& r) { r.generation = std::max(r.generation, generation_ + 1); });
  // candidates: newest first; an empty list means back to the start.
  const bool from_scratch = candidates.empty();
  const uint64_t version = from_scratch ? 0 : candidates.front();
  kj::Vector<kj::Promise<void>> restores;
  for (auto& client : server_clients_) {
    auto request = client.restoreRequest();
    request.setJobId(id_);
    request.setVersion(version);
    request.setFromScratch(from_scratch);
    request.setGeneration(generation_ + 1);  // pushes of older plans fail from now on
    restores.add(request.send().ignoreResult());
  }
  return kj::joinPromises(restores.releaseAsArray())
      .then([version]() { return version; })
      .catch_([this, candidates = kj::mv(candidates), version](kj::Exception&& e) mutable -> kj::Promise<uint64_t> {
        if (candidates.empty()) return kj::mv(e);
        const std::string note = "backup at step " + std::to_string(version) + " unusable (" +
                                 e.getDescription().cStr() + "); falling back to the one before";
        PSLOG(kWarning) << "job " << id_ << ": " << note;
        store_.update(id_, [&](JobRecord& r) { r.notes.push_back(note); });
        candidates.erase(candidates.begin());
        complete_backups_.erase(std::remove(complete_backups_.begin(), complete_backups_.end(), version),
                                complete_backups_.end());
        return restore_servers(kj::mv(candidates));
      });
}

kj::Promise<void> JobRunner::probe_servers() {
  // A server can be gone before its heartbeats say so (a worker saw the connection drop first):
  // ask each one something cheap, and treat one that does not answer as lost.
  kj::Vector<kj::Promise<bool>> probes;
  for (auto& client : server_clients_) {
    auto request = client.backupAtRequest();  // with no version: just "where are you?"
    request.setJobId(id_);
    request.setVersion(std::numeric_limits<uint64_t>::max());
    probes.add(io_.getTimer()
                   .timeoutAfter(3 * kj::SECONDS, request.send().then([this](auto&& r) {
                     reached_version_ = std::max(reached_version_, r.getCurrentVersion());
                     return true;
                   }))
                   .catch_([](kj::Exception&&) { return false; }));
  }
  return kj::joinPromises(probes.releaseAsArray()).then([this](kj::Array<bool> answered) -> kj::Promise<void> {
    bool lost = false;
    for (size_t i = 0; i < answered.size(); ++i) {
      if (answered[i]) continue;
      if (NodeInfo* n = cluster_.find(servers_[i]); n != nullptr && n->alive) {
        PSLOG(kWarning) << "job " << id_ << ": server '" << server_names_[i] << "' does not answer; treating it as lost";
        n->alive = false;
      }
      lost = true;
    }
    if (!lost) return kj::READY_NOW;
    return wait_for_servers(io_.getTimer().now(), io_.getTimer().now() + kServerReturnTimeout).then([this] { return probe_servers(); });
  });
}

kj::Promise<std::vector<uint64_t>> JobRunner::common_backups() {
  // The backups every server holds, newest first: what we recorded as complete, and what the
  // servers report (a backup can be durable everywhere before its last report reached us).
  kj::Vector<kj::Promise<std::vector<uint64_t>>> lists;
  for (auto& client : server_clients_) {
    auto request = client.backupsRequest();
    request.setJobId(id_);
    lists.add(request.send().then([](auto&& r) {
      std::vector<uint64_t> v;
      for (uint64_t x : r.getVersions()) v.push_back(x);
      return v;
    }));
  }
  return kj::joinPromises(lists.releaseAsArray()).then([this](kj::Array<std::vector<uint64_t>> all) {
    std::set<uint64_t> common(all[0].begin(), all[0].end());
    for (size_t i = 1; i < all.size(); ++i) {
      std::set<uint64_t> next;
      for (uint64_t v : all[i]) {
        if (common.count(v) != 0) next.insert(v);
      }
      common = std::move(next);
    }
    for (uint64_t v : complete_backups_) common.insert(v);
    return std::vector<uint64_t>(common.rbegin(), common.rend());
  });
}

kj::Promise<void> JobRunner::run_recovery(std::string why) {
  const uint64_t generation_at_start = generation_;
  return wait_for_servers(io_.getTimer().now(), io_.getTimer().now() + kServerReturnTimeout)
      .then([this] { return probe_servers(); })
      .then([this] { return common_backups(); })
      .then([this](std::vector<uint64_t> candidates) {
        // Async: only cuts whose worker positions we know (not backups from before a restart).
        if (!sync()) std::erase_if(candidates, [this](uint64_t v) { return cut_positions_.count(v) == 0; });
        return restore_servers(kj::mv(candidates));
      })
      .then([this, why, generation_at_start](uint64_t version) -> kj::Promise<void> {
        // Workers: those still alive carry on; with none left, wait for any free one.
        std::vector<uint32_t> alive;
        for (uint32_t w : workers_) {
          const NodeInfo* n = cluster_.find(w);
          if (n != nullptr && n->alive) alive.push_back(w);
        }
        for (uint32_t w : cluster_.free_nodes(proto::Role::WORKER)) {
          if (alive.size() >= static_cast<size_t>(spec_.training.workers)) break;
          cluster_.find(w)->job = id_;
          alive.push_back(w);
        }
        if (alive.empty()) {
          return io_.getTimer().afterDelay(500 * kj::MILLISECONDS).then([this, why] { return run_recovery(why); });
        }
        uint64_t done = reached_version_;  // async: the pushes applied, like `version`
        if (sync()) {
          for (uint64_t steps : worker_steps_) done = std::max(done, steps);
        }
        const uint64_t replayed = done > version ? done - version : 0;
        reached_version_ = 0;
        if (generation_ != generation_at_start) {
          PSLOG(kInfo) << "job " << id_ << ": more losses during recovery";
        }
        // Metrics of the epochs being redone start over.
        const auto first_epoch = sync() ? static_cast<size_t>(version / plan_->steps_per_epoch(0)) : async_resume(alive, version);
        for (size_t e = first_epoch; e < epochs_.size(); ++e) epochs_[e] = EpochMetrics{};
        replan(alive, version, replayed, "rolled back to step " + std::to_string(version));
        return kj::READY_NOW;
      });
}

}  // namespace pstrain

namespace pstrain {

void JobRunner::replan(std::vector<uint32_t> workers, uint64_t version, uint64_t replayed, const std::string& how) {
  workers_ = std::move(workers);
  worker_finished_.assign(workers_.size(), false);
  worker_lost_.assign(workers_.size(), false);
  worker_steps_.assign(workers_.size(), version);
  if (!sync()) {
    for (size_t i = 0; i < workers_.size() && i < resume_positions_.size(); ++i) {
      worker_steps_[i] = resume_positions_[i].steps_done;
    }
  }
  next_cut_at_ = 0;
  worker_rates_.assign(workers_.size(), 0.0);
  plan_.emplace(spec_, train_->size, static_cast<uint32_t>(workers_.size()));
  resume_version_ = version;
  ledger_.erase(ledger_.lower_bound(version), ledger_.end());
  // Acks and replicas of backups past `version` are of the abandoned timeline (the servers
  // deleted those backups when they restored).
  backup_acks_.erase(backup_acks_.upper_bound(version), backup_acks_.end());
  replicas_.erase(replicas_.upper_bound(version), replicas_.end());
  watchers_.clear();
  cutting_ = false;
  ++recoveries_;
  generation_++;
  recovering_ = false;
  state_ = JobState::kRunning;
  configured_ = true;
  PSLOG(kInfo) << "job " << id_ << ": RUNNING again from step " << version << " with " << workers_.size()
               << " worker(s); " << replayed << " step(s) to replay";
  store_.update(id_, [&](JobRecord& r) {
    r.state = "RUNNING";
    r.notes.push_back("recovered (" + r.reason + "): " + how + ", " + std::to_string(replayed) + " step(s) replayed");
    r.reason.clear();
    r.workers = workers_;
    r.generation = std::max(r.generation, generation_);
    r.servers = servers_;
    r.steps_done = static_cast<int64_t>(version);
    r.recoveries = recoveries_;
    r.replayed_steps.push_back(static_cast<int64_t>(replayed));
  });
}

}  // namespace pstrain
