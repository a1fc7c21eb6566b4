// ServerMover: the answer to a server that does not come back: its shard moves to a free server.
//
// Every server sends the coordinator a replica of each backup it has made durable
// (`storeReplica`, in parts; the coordinator keeps them on disk until a newer whole one replaces
// them: ReplicaStore, BackupLedger, and DESIGN-NOTES "Message sizes" on why not in memory). When a lost server
// has not returned (under its name) within JobOptions::move_lost_server_after and a server
// without a job is registered, that server takes the lost one's index: it is configured with the
// job's chunk table for that index, adopts the replica of the newest complete backup into its own
// store (`adoptBackup`, in parts, each read from disk only when the last is written), and from there the recovery is the usual rollback: every server restores
// that backup and the workers get a plan with the new server's address. A sync run then still
// ends with exactly the parameters of an uninterrupted one.
#include "coordinator/job/server_move.h"

#include "common/log.h"
#include "common/rpc/rpc_util.h"

namespace pstrain {

ServerMover::ServerMover(JobContext& job) : job_(job) {}

kj::Maybe<kj::Promise<void>> ServerMover::move_lost() {
  ServerGroup& servers = job_.servers;
  kj::Vector<kj::Promise<void>> moves;
  for (size_t i = 0; i < servers.size(); ++i) {
    if (job_.alive(servers[i].node)) continue;
    // The newest complete backup with a replica of this server's shard.
    const auto replica = job_.backups.newest_replica(i);
    if (!replica) {
      if (no_replica_logged_.insert(servers[i].node).second) {
        PSLOG(kWarning) << "job " << job_.id << ": server '" << servers[i].name
                        << "' is lost and no complete backup has a whole replica of its shard: it cannot move";
      }
      continue;
    }
    const uint64_t version = replica->first;
    NodeId spare_id;
    for (NodeId candidate : job_.cluster.free_nodes(proto::Role::SERVER)) {
      if (failed_spares_.count(candidate) == 0) {
        spare_id = candidate;
        break;
      }
    }
    if (spare_id == NodeId{}) break;
    NodeInfo* spare = job_.cluster.find(spare_id);
    spare->job = job_.id;
    const ServerMember lost = servers[i];
    servers.replace(i, {spare_id, spare->name, spare->address});
    PSLOG(kWarning) << "job " << job_.id << ": server '" << lost.name << "' did not come back; moving its shard to '"
                    << spare->name << "' (" << spare->address << ") from the backup at step " << version;
    auto move = servers.connect(i)
                    .then([this, i] { return job_.servers.configure(i, job_.server_config()); })
                    .then([this, i, version, total = replica->second] { return adopt(i, version, total, 0); });
    moves.add(job_.io.getTimer()
                  .timeoutAfter(job_.options.server_move_timeout, kj::mv(move))
                  .then(
                      [this, i, lost, version] {
                        job_.store.update(job_.id, [&](JobRecord& r) {
                          r.notes.push_back("server '" + lost.name + "' did not come back: its shard moved to '" +
                                            job_.servers[i].name + "' from the backup at step " +
                                            std::to_string(version));
                          r.servers = node_numbers(job_.servers.nodes());
                          r.server_names = job_.servers.names();
                        });
                      },
                      [this, i, spare_id, lost](kj::Exception&& e) {
                        // The spare failed (or vanished) during the move: the place is the lost
                        // server's again, and recovery goes on waiting (or tries another spare).
                        PSLOG(kWarning) << "job " << job_.id << ": moving '" << lost.name << "' to node " << spare_id
                                        << " failed: " << e.getDescription().cStr();
                        failed_spares_.insert(spare_id);
                        if (NodeInfo* n = job_.cluster.find(spare_id); n != nullptr && n->job == job_.id) n->job.clear();
                        job_.servers.replace(i, lost);
                      }));
  }
  if (moves.empty()) return nullptr;
  return kj::joinPromises(moves.releaseAsArray());
}

kj::Promise<void> ServerMover::adopt(size_t index, uint64_t version, size_t total, size_t first) {
  return job_.store.replicas()
      .read({job_.id, version, index}, first, rpc::kMaxPartBytes)
      .then([this, index, version, total, first](std::vector<std::string> chunks) -> kj::Promise<void> {
        KJ_REQUIRE(!chunks.empty() && first + chunks.size() <= total, "the replica is incomplete on disk", version,
                   index, first, total);
        const size_t next = first + chunks.size();
        return job_.servers.adopt_backup(index, version, chunks, first, total)
            .then([this, index, version, total, next]() -> kj::Promise<void> {
              if (next == total) return kj::READY_NOW;
              return adopt(index, version, total, next);
            });
      });
}

}  // namespace pstrain
