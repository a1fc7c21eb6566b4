#include "coordinator/cluster.h"

#include "common/log.h"

namespace pstrain {

NodeId Cluster::register_node(proto::Role role, std::string address, std::string name, std::string cpu) {
  const NodeId id{next_id_++};
  NodeInfo& node = nodes_[id];
  node.id = id;
  node.role = role;
  node.address = std::move(address);
  node.name = std::move(name);
  node.cpu = std::move(cpu);
  node.registered_at = node.last_heartbeat = std::chrono::steady_clock::now();
  PSLOG(kInfo) << "node " << id << " registered: " << (role == proto::Role::SERVER ? "server" : "worker") << " '"
               << node.name << "'" << (node.address.empty() ? "" : " at " + node.address)
               << (node.cpu.empty() ? "" : " (" + node.cpu + ")");
  return id;
}

bool Cluster::heartbeat(NodeId id) {
  NodeInfo* node = find(id);
  if (node == nullptr || !node->alive) return false;
  node->last_heartbeat = std::chrono::steady_clock::now();
  return true;
}

std::vector<NodeId> Cluster::expire() {
  std::vector<NodeId> dead;
  const auto now = std::chrono::steady_clock::now();
  for (auto& [id, node] : nodes_) {
    if (node.alive && now - node.last_heartbeat > dead_after_) {
      node.alive = false;
      dead.push_back(id);
      PSLOG(kWarning) << "node " << id << " ('" << node.name << "') missed its heartbeats: declared dead";
    }
  }
  return dead;
}

NodeInfo* Cluster::find(NodeId id) {
  const auto it = nodes_.find(id);
  return it == nodes_.end() ? nullptr : &it->second;
}

std::vector<NodeId> Cluster::free_nodes(proto::Role role) const {
  std::vector<NodeId> ids;
  for (const auto& [id, node] : nodes_) {
    if (node.alive && node.role == role && node.job.empty()) ids.push_back(id);
  }
  return ids;
}

}  // namespace pstrain
