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
#include <set>

#include "common/log.h"
#include "coordinator/job/job_runner.h"

namespace pstrain {

bool JobRunner::uses_node(uint32_t node) const {
  return servers_.index_of(node).has_value() || worker_index(node).has_value();
}

void JobRunner::on_backup_done(uint32_t node, uint64_t version) {
  const auto index = servers_.index_of(node);
  if (!index || state() == JobState::kSucceeded) return;
  if (!backups_.on_ack(*index, version, servers_.size())) return;
  PSLOG(kInfo) << "job " << id_ << ": backup at step " << version << " complete on all " << servers_.size()
               << " server(s)";
  store_.update(id_, [&](JobRecord& r) { r.last_backup_step = static_cast<int64_t>(version); });
}

void JobRunner::on_node_lost(uint32_t node, const std::string& why) {
  if (state() != JobState::kRunning && state() != JobState::kRecovering) return;
  const auto worker = worker_index(node);
  if (worker && !sync()) {
    // Async: the others simply go on; the lost worker's shard of the epoch is not redone.
    WorkerProgress& w = progress_.workers()[*worker];
    w.finished = true;
    w.lost = true;
    cut_expects_no_more(node);
    PSLOG(kWarning) << "job " << id_ << ": worker " << *worker << " lost (" << why
                    << "); the others go on, and a free worker takes its place";
    servers_.worker_finished(static_cast<uint32_t>(*worker));
    finish_if_done();
    return;
  }
  // A preempted worker left after a cut (servers hold at a backup): rolling back to it loses
  // nothing, and a takeover could not pass the hold.
  if (worker && preempted_.count(node) == 0 && try_take_over(*worker, why)) return;
  recover(why);
}

void JobRunner::recover(const std::string& why) {
  if (state() != JobState::kRunning && state() != JobState::kRecovering) return;
  // A rollback supersedes a takeover or a cut in progress. Their promises stay (this may run
  // inside one of their callbacks); the generation bump below makes a takeover stand down.
  end_async_cut();
  ++generation_;  // every session of the old plan is stale from now on
  if (phase_ == Phase::kRecovering) return;  // the running recovery picks up the new losses
  phase_ = Phase::kRecovering;
  store_.update(id_, [&](JobRecord& r) {
    r.state = state();
    r.reason = why;
  });
  PSLOG(kWarning) << "job " << id_ << ": RECOVERING (" << why << ")";
  recovery_ = run_recovery(why).eagerlyEvaluate([this](kj::Exception&& e) {
    fail(std::string("recovery failed: ") + e.getDescription().cStr());
  });
}

kj::Promise<void> JobRunner::wait_for_servers(kj::TimePoint since, kj::TimePoint deadline) {
  // A server is back when a live node carries its name: the same process, or a restart of it
  // (same name, same data directory, so the same backups).
  std::vector<size_t> replaced;
  bool missing = false;
  for (size_t i = 0; i < servers_.size(); ++i) {
    const NodeInfo* current = cluster_.find(servers_[i].node);
    if (current != nullptr && current->alive) continue;
    bool found = false;
    for (uint32_t candidate : cluster_.free_nodes(proto::Role::SERVER)) {
      NodeInfo* n = cluster_.find(candidate);
      if (n->name == servers_[i].name) {
        n->job = id_;
        servers_.replace(i, {candidate, n->name, n->address});
        replaced.push_back(i);
        found = true;
        break;
      }
    }
    missing = missing || !found;
  }
  kj::Vector<kj::Promise<void>> reconnects;
  for (size_t i : replaced) {
    PSLOG(kInfo) << "job " << id_ << ": server '" << servers_[i].name << "' is back at " << servers_[i].address;
    reconnects.add(servers_.connect(i).then([this, i] {
      return servers_.configure(i, [this](proto::JobConfig::Builder c) { fill_server_config(c); });
    }));
  }
  auto reconnected = kj::joinPromises(reconnects.releaseAsArray());
  if (!missing) return reconnected;
  return reconnected.then([this, since, deadline]() -> kj::Promise<void> {
    if (io_.getTimer().now() >= deadline) {
      std::string names;
      for (size_t i = 0; i < servers_.size(); ++i) {
        const NodeInfo* n = cluster_.find(servers_[i].node);
        if (n == nullptr || !n->alive) names += (names.empty() ? "" : ", ") + servers_[i].name;
      }
      return KJ_EXCEPTION(FAILED, "server(s) did not come back in time", names);
    }
    // Past the move delay, a free server can take a missing server's place from its replica.
    if (io_.getTimer().now() >= since + options_.move_lost_server_after) {
      KJ_IF_MAYBE(moving, move_lost_servers()) {
        return moving->then([this, since, deadline] { return wait_for_servers(since, deadline); });
      }
    }
    return io_.getTimer().afterDelay(options_.recovery_poll).then([this, since, deadline] {
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
  // Pushes of older plans fail from now on.
  return servers_.restore(version, from_scratch, generation_ + 1)
      .then([version]() { return version; })
      .catch_([this, candidates = kj::mv(candidates), version](kj::Exception&& e) mutable -> kj::Promise<uint64_t> {
        if (candidates.empty()) return kj::mv(e);
        const std::string note = "backup at step " + std::to_string(version) + " unusable (" +
                                 e.getDescription().cStr() + "); falling back to the one before";
        PSLOG(kWarning) << "job " << id_ << ": " << note;
        store_.update(id_, [&](JobRecord& r) { r.notes.push_back(note); });
        candidates.erase(candidates.begin());
        backups_.remove_complete(version);
        return restore_servers(kj::mv(candidates));
      });
}

kj::Promise<void> JobRunner::probe_servers() {
  // A server can be gone before its heartbeats say so (a worker saw the connection drop first):
  // ask each one something cheap, and treat one that does not answer as lost.
  return servers_.probe(&reached_version_).then([this](kj::Array<bool> answered) -> kj::Promise<void> {
    bool lost = false;
    for (size_t i = 0; i < answered.size(); ++i) {
      if (answered[i]) continue;
      if (NodeInfo* n = cluster_.find(servers_[i].node); n != nullptr && n->alive) {
        PSLOG(kWarning) << "job " << id_ << ": server '" << servers_[i].name << "' does not answer; treating it as lost";
        n->alive = false;
      }
      lost = true;
    }
    if (!lost) return kj::READY_NOW;
    return wait_for_servers(io_.getTimer().now(), io_.getTimer().now() + options_.server_return_timeout)
        .then([this] { return probe_servers(); });
  });
}

kj::Promise<std::vector<uint64_t>> JobRunner::common_backups() {
  // What the servers all hold, and what we recorded as complete (a backup can be durable
  // everywhere before its last report reached us).
  return servers_.common_backups().then([this](std::vector<uint64_t> held) {
    std::set<uint64_t> all(held.begin(), held.end());
    for (uint64_t v : backups_.complete()) all.insert(v);
    return std::vector<uint64_t>(all.rbegin(), all.rend());
  });
}

kj::Promise<void> JobRunner::run_recovery(std::string why) {
  const uint64_t generation_at_start = generation_;
  return wait_for_servers(io_.getTimer().now(), io_.getTimer().now() + options_.server_return_timeout)
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
          return io_.getTimer().afterDelay(options_.recovery_poll).then([this, why] { return run_recovery(why); });
        }
        // async: the pushes applied, like `version`
        const uint64_t done = sync() ? std::max(reached_version_, progress_.steps_done(true)) : reached_version_;
        const uint64_t replayed = done > version ? done - version : 0;
        reached_version_ = 0;
        if (generation_ != generation_at_start) {
          PSLOG(kInfo) << "job " << id_ << ": more losses during recovery";
        }
        // Metrics of the epochs being redone start over.
        const auto first_epoch = sync() ? static_cast<size_t>(version / plan_->steps_per_epoch(0)) : async_resume(alive, version);
        progress_.restart_epochs_from(first_epoch);
        replan(alive, version, replayed, "rolled back to step " + std::to_string(version));
        return kj::READY_NOW;
      });
}

void JobRunner::replan(std::vector<uint32_t> workers, uint64_t version, uint64_t replayed, const std::string& how) {
  workers_ = std::move(workers);
  progress_.reset_workers(workers_.size(), version);
  if (!sync()) {
    for (size_t i = 0; i < workers_.size() && i < resume_positions_.size(); ++i) {
      progress_.workers()[i].steps = resume_positions_[i].steps_done;
    }
  }
  next_cut_at_ = 0;
  plan_.emplace(spec_, train_->size, static_cast<uint32_t>(workers_.size()));
  resume_version_ = version;
  progress_.forget_from(version);
  // Acks and replicas of backups past `version` are of the abandoned timeline (the servers
  // deleted those backups when they restored).
  backups_.forget_after(version);
  watchers_.clear();
  ++recoveries_;
  generation_++;
  phase_ = Phase::kRunning;
  PSLOG(kInfo) << "job " << id_ << ": RUNNING again from step " << version << " with " << workers_.size()
               << " worker(s); " << replayed << " step(s) to replay";
  store_.update(id_, [&](JobRecord& r) {
    r.state = state();
    r.notes.push_back("recovered (" + r.reason + "): " + how + ", " + std::to_string(replayed) + " step(s) replayed");
    r.reason.clear();
    r.workers = workers_;
    r.generation = std::max(r.generation, generation_);
    r.servers = servers_.nodes();
    r.steps_done = static_cast<int64_t>(version);
    r.recoveries = recoveries_;
    r.replayed_steps.push_back(static_cast<int64_t>(replayed));
  });
}

}  // namespace pstrain
