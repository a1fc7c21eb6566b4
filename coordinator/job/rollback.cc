// Rollback (docs/DESIGN-NOTES.md "Recovery of a server or coordinator is a rollback"): the recovery
// every other one falls back to. (Cuts: sync_cut.cc;
// a lost sync worker's takeover: takeover.cc; async mode: async_cuts.cc; moving a lost server's
// shard: server_move.cc; what a lost node means for the job: JobFaults::on_node_lost.)
//
// A rollback: every server goes back to the latest backup that all of
// them hold intact (or to the initial parameters), the workers that are alive get new
// assignments starting at that step, and training goes on. Because a sync run is deterministic
// (fixed data order, slice-ordered sums), the result equals an uninterrupted run when the worker
// count is unchanged.
#include "coordinator/job/rollback.h"

#include <algorithm>
#include <set>

#include "common/base/log.h"

namespace pstrain {

Rollback::Rollback(JobContext& job, ServerMover& mover, const AsyncCuts& cuts)
    : job_(job), mover_(mover), cuts_(cuts) {}

kj::Promise<void> Rollback::wait_for_servers(kj::TimePoint since, kj::TimePoint deadline) {
  // A server is back when a live node carries its name: the same process, or a restart of it
  // (same name, same data directory, so the same backups).
  ServerGroup& servers = job_.servers;
  std::vector<size_t> replaced;
  bool missing = false;
  for (size_t i = 0; i < servers.size(); ++i) {
    if (job_.alive(servers[i].node)) continue;
    bool found = false;
    for (NodeId candidate : job_.cluster.free_nodes(proto::Role::SERVER)) {
      NodeInfo* n = job_.cluster.find(candidate);
      if (n->name == servers[i].name) {
        n->job = job_.id;
        servers.replace(i, {candidate, n->name, n->address});
        replaced.push_back(i);
        found = true;
        break;
      }
    }
    missing = missing || !found;
  }
  kj::Vector<kj::Promise<void>> reconnects;
  for (size_t i : replaced) {
    PSLOG(kInfo) << "job " << job_.id << ": server '" << servers[i].name << "' is back at " << servers[i].address;
    reconnects.add(servers.connect(i).then([this, i] { return job_.servers.configure(i, job_.server_config()); }));
  }
  auto reconnected = kj::joinPromises(reconnects.releaseAsArray());
  if (!missing) return reconnected;
  return reconnected.then([this, since, deadline]() -> kj::Promise<void> {
    kj::Timer& timer = job_.io.getTimer();
    if (timer.now() >= deadline) {
      std::string names;
      for (size_t i = 0; i < job_.servers.size(); ++i) {
        if (!job_.alive(job_.servers[i].node)) names += (names.empty() ? "" : ", ") + job_.servers[i].name;
      }
      return KJ_EXCEPTION(FAILED, "server(s) did not come back in time", names);
    }
    // Past the move delay, a free server can take a missing server's place from its replica.
    if (timer.now() >= since + job_.options.move_lost_server_after) {
      KJ_IF_MAYBE(moving, mover_.move_lost()) {
        return moving->then([this, since, deadline] { return wait_for_servers(since, deadline); });
      }
    }
    return timer.afterDelay(job_.options.recovery_poll).then([this, since, deadline] {
      return wait_for_servers(since, deadline);
    });
  });
}

kj::Promise<uint64_t> Rollback::restore(std::vector<uint64_t> candidates) {
  // Recorded before any server sees it: a coordinator restarted later starts past it.
  job_.store.update(job_.id, [&](JobRecord& r) { r.generation = std::max(r.generation, job_.generation + 1); });
  // candidates: newest first; an empty list means back to the start.
  const bool from_scratch = candidates.empty();
  const uint64_t version = from_scratch ? 0 : candidates.front();
  // Pushes of older plans fail from now on.
  return job_.servers.restore(version, from_scratch, job_.generation + 1)
      .then([version]() { return version; })
      .catch_([this, candidates = kj::mv(candidates), version](kj::Exception&& e) mutable -> kj::Promise<uint64_t> {
        if (candidates.empty()) return kj::mv(e);
        const std::string note = "backup at step " + std::to_string(version) + " unusable (" +
                                 e.getDescription().cStr() + "); falling back to the one before";
        PSLOG(kWarning) << "job " << job_.id << ": " << note;
        job_.store.update(job_.id, [&](JobRecord& r) { r.notes.push_back(note); });
        candidates.erase(candidates.begin());
        job_.backups.remove_complete(version);
        return restore(kj::mv(candidates));
      });
}

kj::Promise<void> Rollback::probe_servers() {
  // A server can be gone before its heartbeats say so (a worker saw the connection drop first):
  // ask each one something cheap, and treat one that does not answer as lost.
  return job_.servers.probe(&reached_version_).then([this](kj::Array<bool> answered) -> kj::Promise<void> {
    bool lost = false;
    for (size_t i = 0; i < answered.size(); ++i) {
      if (answered[i]) continue;
      if (NodeInfo* n = job_.cluster.find(job_.servers[i].node); n != nullptr && n->alive) {
        PSLOG(kWarning) << "job " << job_.id << ": server '" << job_.servers[i].name
                        << "' does not answer; treating it as lost";
        n->alive = false;
      }
      lost = true;
    }
    if (!lost) return kj::READY_NOW;
    const kj::TimePoint now = job_.io.getTimer().now();
    return wait_for_servers(now, now + job_.options.server_return_timeout).then([this] { return probe_servers(); });
  });
}

kj::Promise<std::vector<uint64_t>> Rollback::common_backups() {
  // What the servers all hold, and what we recorded as complete (a backup can be durable
  // everywhere before its last report reached us); newest first.
  return job_.servers.common_backups().then([this](std::vector<uint64_t> held) {
    std::set<uint64_t> all(held.begin(), held.end());
    for (uint64_t v : job_.backups.complete()) all.insert(v);
    return std::vector<uint64_t>(all.rbegin(), all.rend());
  });
}

kj::Promise<Rollback::Outcome> Rollback::run() {
  const uint64_t generation_at_start = job_.generation;
  const kj::TimePoint now = job_.io.getTimer().now();
  return wait_for_servers(now, now + job_.options.server_return_timeout)
      .then([this] { return probe_servers(); })
      .then([this] { return common_backups(); })
      .then([this](std::vector<uint64_t> candidates) {
        // Async: only cuts whose worker positions we know (not backups from before a restart).
        if (!job_.sync()) std::erase_if(candidates, [this](uint64_t v) { return !cuts_.has_positions(v); });
        return restore(kj::mv(candidates));
      })
      .then([this, generation_at_start](uint64_t version) -> kj::Promise<Outcome> {
        // Workers: those still alive carry on; with none left, wait for any free one.
        std::vector<NodeId> alive;
        for (NodeId w : job_.workers) {
          if (job_.alive(w)) alive.push_back(w);
        }
        for (NodeId w : job_.cluster.free_nodes(proto::Role::WORKER)) {
          if (alive.size() >= static_cast<size_t>(job_.spec.training.workers)) break;
          job_.cluster.find(w)->job = job_.id;
          alive.push_back(w);
        }
        if (alive.empty()) {
          return job_.io.getTimer().afterDelay(job_.options.recovery_poll).then([this] { return run(); });
        }
        // The steps done before the loss: the furthest worker's (sync), or the pushes applied (async).
        const uint64_t done =
            job_.sync() ? std::max(reached_version_, job_.progress.steps_done(true)) : reached_version_;
        reached_version_ = 0;
        if (job_.generation != generation_at_start) {
          PSLOG(kInfo) << "job " << job_.id << ": more losses during recovery";
        }
        return Outcome{version, std::move(alive), done > version ? done - version : 0};
      });
}

}  // namespace pstrain
