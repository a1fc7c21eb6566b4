#include "coordinator/cluster/cluster.h"

#include <algorithm>

#include "common/base/log.h"

namespace pstrain {

namespace {

double seconds_between(SteadyTime a, SteadyTime b) { return std::chrono::duration<double>(b - a).count(); }

}  // namespace

NodeId Cluster::register_node(proto::Role role, std::string address, std::string name, std::string cpu,
                              uint64_t incarnation) {
  const NodeId id{next_id_++};
  NodeInfo& node = nodes_[id];
  node.id = id;
  node.role = role;
  node.address = std::move(address);
  node.name = std::move(name);
  node.cpu = std::move(cpu);
  node.incarnation = incarnation;
  node.registered_at = node.last_heartbeat = node.progress_at = std::chrono::steady_clock::now();
  PSLOG(kInfo) << "node " << id << " registered: " << (role == proto::Role::SERVER ? "server" : "worker") << " '"
               << node.name << "'" << (node.address.empty() ? "" : " at " + node.address)
               << (node.cpu.empty() ? "" : " (" + node.cpu + ")");
  return id;
}

NodeInfo* Cluster::reconnecting(proto::Role role, const std::string& name, uint64_t incarnation,
                                const std::string& address) {
  if (incarnation == 0) return nullptr;
  for (auto& [id, node] : nodes_) {
    if (node.alive && node.role == role && node.name == name && node.incarnation == incarnation) {
      node.address = address;
      node.last_heartbeat = std::chrono::steady_clock::now();
      PSLOG(kInfo) << "node " << id << " ('" << name << "') connected again: the same process, the same node";
      return &node;
    }
  }
  return nullptr;
}

bool Cluster::heartbeat(NodeId id, uint64_t progress) {
  NodeInfo* node = find(id);
  if (node == nullptr || !node->alive) return false;
  const auto now = std::chrono::steady_clock::now();
  node->last_heartbeat = now;
  if (progress > node->progress) {
    // The time one unit took since the last advance, averaged: a node's own pace.
    const double per_unit = seconds_between(node->progress_at, now) / static_cast<double>(progress - node->progress);
    node->unit_seconds = node->unit_seconds == 0 ? per_unit : 0.7 * node->unit_seconds + 0.3 * per_unit;
    node->progress = progress;
    node->progress_at = now;
  } else if (progress < node->progress) {
    node->progress = progress;  // a counter that starts over (a new session): no pace to keep
    node->progress_at = now;
  }
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

void Cluster::grace() {
  const auto now = std::chrono::steady_clock::now();
  for (auto& [id, node] : nodes_) {
    if (!node.alive) continue;
    node.last_heartbeat = std::max(node.last_heartbeat, now);
    node.progress_at = std::max(node.progress_at, now);
  }
}

std::vector<StallChange> Cluster::stall_changes(std::chrono::milliseconds min_quiet, double factor) {
  std::vector<StallChange> changes;
  const auto now = std::chrono::steady_clock::now();
  for (auto& [id, node] : nodes_) {
    const double quiet = seconds_between(node.progress_at, now);
    const double limit = std::max(std::chrono::duration<double>(min_quiet).count(), factor * node.unit_seconds);
    const bool stalled = node.alive && !node.job.empty() && node.unit_seconds > 0 && quiet > limit;
    if (stalled != node.stalled) {
      node.stalled = stalled;
      changes.push_back({id, stalled, quiet, node.unit_seconds});
    }
  }
  return changes;
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
