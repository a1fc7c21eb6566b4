// JobRunner's answer to a server that does not come back: its shard moves to a free server.
//
// Every server sends the coordinator a replica of each backup it has made durable
// (`storeReplica`; the coordinator keeps the last three versions in memory). When a lost server
// has not returned (under its name) within RecoveryOptions::move_lost_server_after and a server
// without a job is registered, that server takes the lost one's index: it is configured with the
// job's chunk table for that index, adopts the replica of the newest complete backup into its own
// store (`adoptBackup`), and from there the recovery is the usual rollback: every server restores
// that backup and the workers get a plan with the new server's address. A sync run then still
// ends with exactly the parameters of an uninterrupted one.
#include <algorithm>

#include "common/log.h"
#include "coordinator/job_runner.h"

namespace pstrain {

void JobRunner::on_replica(uint32_t node, uint64_t version, std::vector<std::string> chunks) {
  const auto it = std::find(servers_.begin(), servers_.end(), node);
  if (it == servers_.end() || state_ == JobState::kSucceeded) return;
  replicas_[version][static_cast<size_t>(it - servers_.begin())] = std::move(chunks);
  while (replicas_.size() > 3) replicas_.erase(replicas_.begin());
}

kj::Maybe<kj::Promise<void>> JobRunner::move_lost_servers() {
  kj::Vector<kj::Promise<void>> moves;
  for (size_t i = 0; i < servers_.size(); ++i) {
    const NodeInfo* current = cluster_.find(servers_[i]);
    if (current != nullptr && current->alive) continue;
    // The newest complete backup with a replica of this server's shard.
    const std::vector<std::string>* replica = nullptr;
    uint64_t version = 0;
    for (auto v = complete_backups_.rbegin(); v != complete_backups_.rend() && replica == nullptr; ++v) {
      const auto at = replicas_.find(*v);
      if (at == replicas_.end()) continue;
      const auto of = at->second.find(i);
      if (of == at->second.end()) continue;
      replica = &of->second;
      version = *v;
    }
    if (replica == nullptr) continue;
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
    const uint32_t lost_node = servers_[i];
    const std::string lost_name = server_names_[i], lost_address = server_addresses_[i];
    servers_[i] = spare_id;
    server_addresses_[i] = spare->address;
    server_names_[i] = spare->name;
    PSLOG(kWarning) << "job " << id_ << ": server '" << lost_name << "' did not come back; moving its shard to '"
                    << spare->name << "' (" << spare->address << ") from the backup at step " << version;
    auto move = connect_server(i)
                    .then([this, i] { return configure_server(i); })
                    .then([this, i, version, chunks = *replica] {
                      auto request = server_clients_[i].adoptBackupRequest();
                      request.setJobId(id_);
                      request.setVersion(version);
                      auto list = request.initChunks(static_cast<unsigned>(chunks.size()));
                      for (size_t c = 0; c < chunks.size(); ++c) {
                        list.set(static_cast<unsigned>(c), capnp::Data::Reader(reinterpret_cast<const kj::byte*>(chunks[c].data()),
                                                                                chunks[c].size()));
                      }
                      return request.send().ignoreResult();
                    });
    moves.add(io_.getTimer()
                  .timeoutAfter(30 * kj::SECONDS, kj::mv(move))
                  .then(
                      [this, i, lost_name, version] {
                        store_.update(id_, [&](JobRecord& r) {
                          r.notes.push_back("server '" + lost_name + "' did not come back: its shard moved to '" +
                                            server_names_[i] + "' from the backup at step " + std::to_string(version));
                          r.servers = servers_;
                          r.server_names = server_names_;
                        });
                      },
                      [this, i, spare_id, lost_node, lost_name, lost_address](kj::Exception&& e) {
                        // The spare failed (or vanished) during the move: the place is the lost
                        // server's again, and recovery goes on waiting (or tries another spare).
                        PSLOG(kWarning) << "job " << id_ << ": moving '" << lost_name << "' to node " << spare_id
                                        << " failed: " << e.getDescription().cStr();
                        failed_spares_.insert(spare_id);
                        if (NodeInfo* n = cluster_.find(spare_id); n != nullptr && n->job == id_) n->job.clear();
                        servers_[i] = lost_node;
                        server_addresses_[i] = lost_address;
                        server_names_[i] = lost_name;
                      }));
  }
  if (moves.empty()) return nullptr;
  return kj::joinPromises(moves.releaseAsArray());
}

}  // namespace pstrain
