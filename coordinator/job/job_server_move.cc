// JobRunner's answer to a server that does not come back: its shard moves to a free server.
//
// Every server sends the coordinator a replica of each backup it has made durable
// (`storeReplica`; the coordinator keeps the last three versions in memory). When a lost server
// has not returned (under its name) within JobOptions::move_lost_server_after and a server
// without a job is registered, that server takes the lost one's index: it is configured with the
// job's chunk table for that index, adopts the replica of the newest complete backup into its own
// store (`adoptBackup`), and from there the recovery is the usual rollback: every server restores
// that backup and the workers get a plan with the new server's address. A sync run then still
// ends with exactly the parameters of an uninterrupted one.
#include <algorithm>

#include "common/log.h"
#include "coordinator/job/job_runner.h"

namespace pstrain {

void JobRunner::on_replica(uint32_t node, uint64_t version, std::vector<std::string> chunks) {
  const auto index = servers_.index_of(node);
  if (!index || state() == JobState::kSucceeded) return;
  backups_.add_replica(version, *index, std::move(chunks));
}

kj::Maybe<kj::Promise<void>> JobRunner::move_lost_servers() {
  kj::Vector<kj::Promise<void>> moves;
  for (size_t i = 0; i < servers_.size(); ++i) {
    const NodeInfo* current = cluster_.find(servers_[i].node);
    if (current != nullptr && current->alive) continue;
    // The newest complete backup with a replica of this server's shard.
    const auto replica = backups_.newest_replica(i);
    if (!replica) continue;
    const uint64_t version = replica->first;
    uint32_t spare_id = 0;
    for (uint32_t candidate : cluster_.free_nodes(proto::Role::SERVER)) {
      if (failed_spares_.count(candidate) == 0) {
        spare_id = candidate;
        break;
      }
    }
    if (spare_id == 0) break;
    NodeInfo* spare = cluster_.find(spare_id);
    spare->job = id_;
    const ServerMember lost = servers_[i];
    servers_.replace(i, {spare_id, spare->name, spare->address});
    PSLOG(kWarning) << "job " << id_ << ": server '" << lost.name << "' did not come back; moving its shard to '"
                    << spare->name << "' (" << spare->address << ") from the backup at step " << version;
    auto move = servers_.connect(i)
                    .then([this, i] {
                      return servers_.configure(i, [this](proto::JobConfig::Builder c) { fill_server_config(c); });
                    })
                    .then([this, i, version, chunks = *replica->second] {
                      return servers_.adopt_backup(i, version, chunks);
                    });
    moves.add(io_.getTimer()
                  .timeoutAfter(options_.server_move_timeout, kj::mv(move))
                  .then(
                      [this, i, lost, version] {
                        store_.update(id_, [&](JobRecord& r) {
                          r.notes.push_back("server '" + lost.name + "' did not come back: its shard moved to '" +
                                            servers_[i].name + "' from the backup at step " + std::to_string(version));
                          r.servers = servers_.nodes();
                          r.server_names = servers_.names();
                        });
                      },
                      [this, i, spare_id, lost](kj::Exception&& e) {
                        // The spare failed (or vanished) during the move: the place is the lost
                        // server's again, and recovery goes on waiting (or tries another spare).
                        PSLOG(kWarning) << "job " << id_ << ": moving '" << lost.name << "' to node " << spare_id
                                        << " failed: " << e.getDescription().cStr();
                        failed_spares_.insert(spare_id);
                        if (NodeInfo* n = cluster_.find(spare_id); n != nullptr && n->job == id_) n->job.clear();
                        servers_.replace(i, lost);
                      }));
  }
  if (moves.empty()) return nullptr;
  return kj::joinPromises(moves.releaseAsArray());
}

}  // namespace pstrain
