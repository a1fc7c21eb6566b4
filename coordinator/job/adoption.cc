// Adoption: a job that a restarted coordinator re-queued goes on where it was, with any number of
// jobs running, whichever servers register first and in any order (docs/DESIGN-NOTES.md
// "Coordinator loss").
//
// Where the servers go. A server's backups of a job are on its own disk, under the job's id, for
// the index it had. The record keeps the server names by index; a re-queued job waits for those
// names (for JobOptions::move_lost_server_after from the restart, as a recovery waits for a lost
// server before it moves the shard) and no other job takes them meanwhile. Before that wait, the
// first job to be scheduled took whatever servers had registered first: with two jobs running,
// each could get the other's server, find no backup there and start again from step 0 (issue 48).
//
// What it goes on from. Sync: workers train on while the coordinator is down (their buffered or
// locally read data, unanswered reports), and their sessions end at step boundaries once they need
// it (their data ends, an evaluation). The restarted coordinator waits until one of the job's
// workers says its old session ended (old_plan_stopped): from then no step can complete without
// that worker's slice, so a sync job's chunks all stand at one step v and stay there: the
// workers' new plan starts there and nothing is replayed. (Probing sooner could see a step half
// applied, or settle at v while an old step completes: issue 50's CI run found that.) Pushes of the old plan still
// waiting at the servers are failed and fenced off by a settle at v, and any cut hold the old
// coordinator left is lifted after it (lifted first, the hold could let an old step apply).
// Where that fails (a server restarted meanwhile, or not at one step), the servers are configured
// afresh and restore the newest complete backup.
//
// Backups wherever they are. If a recorded server does not come back within the wait, another
// takes its index; its backups are then the replicas every server sent the coordinator, which now
// survive the coordinator's restart (ReplicaStore keeps a "whole" marker beside each replica's
// last part). The moved server adopts the replica of the newest complete backup that is whole for
// every moved index (as a spare does in server_move.cc), the others restore theirs from disk, and
// the job goes on from there. The old server, should it come back, drops the job first.
#include "coordinator/job/adoption.h"

#include <algorithm>

#include "common/base/log.h"

namespace pstrain {

kj::Promise<uint64_t> adopt_servers_state(JobContext& job) {
  return job.servers.versions().then([&job](kj::Array<ServerVersions> versions) {
    const uint64_t version = versions[0].lowest;
    for (const auto& v : versions) {
      KJ_REQUIRE(v.lowest == version && v.highest == version, "the servers' chunks are not at one step", v.lowest,
                 v.highest, version);
    }
    return job.servers.settle_and_release(version, job.generation).then([version] { return version; });
  });
}

kj::Promise<void> Adoption::old_plan_stopped() {
  const kj::TimePoint until = job_.io.getTimer().now() + job_.options.move_lost_server_after;
  return wait_for_old_plan(until);
}

kj::Promise<void> Adoption::wait_for_old_plan(kj::TimePoint until) {
  // Any worker (it may have gone to another job since): a session of the old plan's generation
  // (or a later one: none can be later) ended. An older session's report says nothing of it.
  for (const auto& [id, node] : job_.cluster.nodes()) {
    if (node.ended_session_of == job_.id && node.ended_generation >= old_generation_) return kj::READY_NOW;
  }
  if (job_.io.getTimer().now() >= until) {
    PSLOG(kInfo) << "job " << job_.id << ": no worker said its session of the old plan ended; probing the servers";
    return kj::READY_NOW;
  }
  return job_.io.getTimer().afterDelay(20 * kj::MILLISECONDS).then([this, until] { return wait_for_old_plan(until); });
}

void Adoption::load(const JobRecord& record) {
  requeued_while_running_ = record.state == JobState::kRunning || record.state == JobState::kRecovering;
  old_generation_ = static_cast<uint64_t>(record.generation);
  recorded_names_ = record.server_names;
  steps_done_before_ = static_cast<uint64_t>(std::max<int64_t>(record.steps_done, 0));
  wait_until_ = job_.io.getTimer().now() + job_.options.move_lost_server_after;
  // Complete backups: the record's last, and every version whose replicas are whole for all the
  // job's servers (each server sends its replica once its backup is durable, so a version whole
  // for all was written by all: complete, even if the record's last write did not land).
  std::set<uint64_t> complete;
  if (record.last_backup_step) complete.insert(static_cast<uint64_t>(*record.last_backup_step));
  const auto stored = job_.store.replicas().whole_replicas(job_.id);
  for (const StoredReplica& r : stored) job_.backups.add_replica_part(r.version, r.server, 0, r.chunks, r.chunks);
  const auto servers = static_cast<size_t>(job_.spec.training.servers);
  for (const StoredReplica& r : stored) {
    if (job_.backups.replicas_whole(r.version, servers)) complete.insert(r.version);
  }
  for (uint64_t v : complete) job_.backups.add_complete(v);  // ascending
  for (uint64_t dropped : job_.backups.drop_superseded_replicas()) job_.store.replicas().erase(job_.id, dropped);
  if (!stored.empty()) {
    PSLOG(kInfo) << "job " << job_.id << ": " << stored.size() << " whole backup replica(s) kept from before the restart"
                 << (complete.empty() ? "" : ", newest complete backup at step " + std::to_string(*complete.rbegin()));
  }
}

std::vector<std::string> Adoption::awaited_servers() const {
  if (!requeued_while_running_ || job_.phase != JobPhase::kPending) return {};
  if (job_.io.getTimer().now() >= wait_until_) return {};
  return recorded_names_;
}

std::optional<std::vector<NodeId>> Adoption::place(const std::vector<NodeId>& free_servers,
                                                   const std::set<std::string>& awaited, size_t count) const {
  Cluster& cluster = job_.cluster;
  const std::vector<std::string> own = awaited_servers();
  std::vector<NodeId> by_name;
  for (NodeId id : free_servers) {
    const std::string& name = cluster.find(id)->name;
    // Another job's recorded server, while that job waits for it.
    if (awaited.count(name) != 0 && std::find(own.begin(), own.end(), name) == own.end()) continue;
    by_name.push_back(id);
  }
  std::sort(by_name.begin(), by_name.end(),
            [&cluster](NodeId a, NodeId b) { return cluster.find(a)->name < cluster.find(b)->name; });
  std::vector<NodeId> chosen(count);
  for (size_t i = 0; i < count && i < recorded_names_.size(); ++i) {
    const auto it = std::find_if(by_name.begin(), by_name.end(),
                                 [&](NodeId n) { return cluster.find(n)->name == recorded_names_[i]; });
    if (it != by_name.end()) {
      chosen[i] = *it;
      by_name.erase(it);
    } else if (!own.empty()) {
      return std::nullopt;  // still waiting for this index's server
    }
  }
  for (NodeId& slot : chosen) {
    if (slot != NodeId{}) continue;
    if (by_name.empty()) return std::nullopt;
    slot = by_name.front();
    by_name.erase(by_name.begin());
  }
  return chosen;
}

std::vector<size_t> Adoption::moved() const {
  std::vector<size_t> out;
  if (!requeued_while_running_) return out;
  for (size_t i = 0; i < job_.servers.size(); ++i) {
    if (i >= recorded_names_.size() || job_.servers[i].name != recorded_names_[i]) out.push_back(i);
  }
  return out;
}

kj::Promise<std::optional<uint64_t>> Adoption::adopt_replicas(std::function<bool(uint64_t)> usable) {
  const std::vector<size_t> indexes = moved();
  if (indexes.empty()) return std::optional<uint64_t>();
  const std::vector<uint64_t>& complete = job_.backups.complete();
  std::optional<uint64_t> version;
  for (auto v = complete.rbegin(); v != complete.rend() && !version; ++v) {
    if (!usable(*v)) continue;
    const bool whole = std::all_of(indexes.begin(), indexes.end(),
                                   [&](size_t i) { return job_.backups.whole_replica(*v, i).has_value(); });
    if (whole) version = *v;
  }
  std::string names;
  for (size_t i : indexes) {
    names += (names.empty() ? "" : ", ") + job_.servers[i].name + " at index " + std::to_string(i);
    if (i < recorded_names_.size()) mover_.moved_away(recorded_names_[i]);
  }
  if (!version) {
    PSLOG(kWarning) << "job " << job_.id << ": server(s) " << names
                    << " hold no backup of the job and no complete backup has whole replicas for them";
    return std::optional<uint64_t>();
  }
  PSLOG(kInfo) << "job " << job_.id << ": server(s) " << names << " adopt the replicas of the backup at step "
               << *version << " (their recorded servers did not come back)";
  kj::Vector<kj::Promise<void>> adoptions;
  for (size_t i : indexes) adoptions.add(mover_.adopt_replica(i, *version, *job_.backups.whole_replica(*version, i)));
  return kj::joinPromises(adoptions.releaseAsArray()).then([this, version, names] {
    job_.store.update(job_.id, [&](JobRecord& r) {
      r.notes.push_back("coordinator restarted: server(s) " + names + " adopted the replicas of the backup at step " +
                        std::to_string(*version));
    });
    return version;
  });
}

}  // namespace pstrain
