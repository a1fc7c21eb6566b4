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
//
// The lost server may not be dead: frozen (SIGSTOP, a stopped VM, a long pause) or cut off from the
// coordinator while the workers still reach it. It then still holds the job's shard as it was, and
// nothing told it of the new plan (its min generation never rose), so it would apply any push of
// the old plan (a worker resumed from a freeze) and keep the stale shard for ever. The workers of
// the new plan no longer use it, and its backups and replicas count for nothing (the ledger takes
// them by node id, and it registers again under a new one), so there is no split brain in what
// the job computes; but it must not go on serving the job. When it comes back (registers again
// under its name), on_server_registered tells it to drop the job (its shard and its backups of
// it: the new server adopted the replica), and only then is it free for any job, as a spare.
#include "coordinator/job/server_move.h"

#include "common/base/log.h"
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
                        moved_away_.insert(lost.name);
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

void ServerMover::on_server_registered(NodeId node) {
  NodeInfo* info = job_.cluster.find(node);
  if (info == nullptr || info->role != proto::Role::SERVER || moved_away_.count(info->name) == 0) return;
  if (job_.servers.index_of(node)) return;  // (a name the job uses again: its own server)
  if (!info->job.empty()) return;
  info->job = job_.id;  // reserved: no job (nor a move) takes it before it has dropped this one
  const std::string name = info->name, address = info->address;
  PSLOG(kWarning) << "job " << job_.id << ": server '" << name << "' (" << address
                  << ") came back after its shard moved; telling it to drop the job";
  auto drop = rpc::connect(job_.io, rpc::parse_host_port(address, 7100, "server address"), job_.options.cluster)
                  .then([this](kj::Own<rpc::Connection> connection) {
                    auto client = connection->bootstrap().castAs<proto::ParameterServer>();
                    auto request = client.dropJobRequest();
                    request.setJobId(job_.id);
                    return request.send().ignoreResult().attach(kj::mv(connection));
                  });
  fences_.add(job_.io.getTimer()
                  .timeoutAfter(job_.options.server_call_timeout, kj::mv(drop))
                  .then(
                      [this, node, name] {
                        PSLOG(kInfo) << "job " << job_.id << ": server '" << name << "' dropped the job; it is a spare";
                        job_.store.update(job_.id, [&](JobRecord& r) {
                          r.notes.push_back("server '" + name + "' came back after its shard moved: it dropped the job");
                        });
                        if (NodeInfo* n = job_.cluster.find(node); n != nullptr && n->job == job_.id) n->job.clear();
                      },
                      [this, name](kj::Exception&& e) {
                        // It stays reserved: a server that cannot drop the job may still serve
                        // it, so it is handed to no job; it registers again when it restarts.
                        PSLOG(kWarning) << "job " << job_.id << ": server '" << name
                                        << "' came back but did not drop the job: " << e.getDescription().cStr();
                      }));
}

void ServerMover::taskFailed(kj::Exception&& exception) {
  PSLOG(kWarning) << "job " << job_.id << ": " << exception.getDescription().cStr();
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
