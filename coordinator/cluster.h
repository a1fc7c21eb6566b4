// Cluster membership: the nodes that registered, their role and address, their heartbeats, and
// which job each one is working for.
//
// Thread rules: event-loop thread only.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "common/ids.h"
#include "common/proto/pstrain.capnp.h"

namespace pstrain {

struct NodeInfo {
  NodeId id;
  proto::Role role = proto::Role::WORKER;
  std::string address;  // servers: where workers reach them
  std::string name;
  std::string cpu;  // what it computes with (describe_compute), as it registered
  std::chrono::steady_clock::time_point registered_at, last_heartbeat;
  bool alive = true;
  std::string job;  // empty: free
};

class Cluster {
 public:
  explicit Cluster(std::chrono::milliseconds dead_after) : dead_after_(dead_after) {}

  NodeId register_node(proto::Role role, std::string address, std::string name, std::string cpu = {});
  // false if the node is unknown (or was declared dead): it must register again.
  bool heartbeat(NodeId id);
  // Declares nodes dead whose last heartbeat is older than the timeout; returns their ids.
  std::vector<NodeId> expire();

  NodeInfo* find(NodeId id);
  std::vector<NodeId> free_nodes(proto::Role role) const;
  const std::map<NodeId, NodeInfo>& nodes() const { return nodes_; }

 private:
  std::chrono::milliseconds dead_after_;
  std::map<NodeId, NodeInfo> nodes_;
  uint32_t next_id_ = 1;
};

}  // namespace pstrain
