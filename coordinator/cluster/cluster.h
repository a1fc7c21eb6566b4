// Cluster membership: the nodes that registered, their role and address, their heartbeats and
// progress, and which job each one is working for.
//
// Liveness (docs/DESIGN-NOTES.md, "Liveness"): a node is alive while its heartbeats arrive (they
// come from a thread of the node's own, whatever the node computes). A live node whose progress
// counter (steps, updates) stops advancing far beyond its own recent pace is *stalled*: reported,
// not declared dead. A node that registers again with the incarnation of a live registration is
// that same process reconnecting and keeps its id.
//
// Thread rules: event-loop thread only.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "common/base/ids.h"
#include "common/rpc/proto/pstrain.capnp.h"

namespace pstrain {

using SteadyTime = std::chrono::steady_clock::time_point;

struct NodeInfo {
  NodeId id;
  proto::Role role = proto::Role::WORKER;
  std::string address;  // servers: where workers reach them
  std::string name;
  std::string cpu;  // what it computes with (describe_compute), as it registered
  uint64_t incarnation = 0;  // its process's (0: not said)
  SteadyTime registered_at, last_heartbeat;
  bool alive = true;
  std::string job;  // empty: free
  // Workers: the job whose session the worker last said had ended (getAssignment's brokenJobId),
  // and that session's plan generation (its minGeneration - 1).
  std::string ended_session_of;
  uint64_t ended_generation = 0;
  // Progress: the counter its heartbeats carry, when it last advanced, and the time one unit of
  // it took lately (exponential average; 0 until it advanced twice).
  uint64_t progress = 0;
  SteadyTime progress_at;
  double unit_seconds = 0;
  bool stalled = false;
};

// Nodes whose stall state changed (stall_changes()).
struct StallChange {
  NodeId id;
  bool stalled;                // true: newly stalled; false: advancing again
  double quiet_seconds = 0;    // since its progress last advanced
  double unit_seconds = 0;     // its recent time per unit of progress
};

class Cluster {
 public:
  explicit Cluster(std::chrono::milliseconds dead_after) : dead_after_(dead_after) {}

  NodeId register_node(proto::Role role, std::string address, std::string name, std::string cpu = {},
                       uint64_t incarnation = 0);
  // The live node of this role, name and (nonzero) incarnation, if any: the same process
  // registering again. Its registration is refreshed (address, heartbeat).
  NodeInfo* reconnecting(proto::Role role, const std::string& name, uint64_t incarnation, const std::string& address);
  // false if the node is unknown (or was declared dead): it must register again.
  bool heartbeat(NodeId id, uint64_t progress = 0);
  // Declares nodes dead whose last heartbeat is older than the timeout; returns their ids.
  std::vector<NodeId> expire();
  // A fresh timeout for every live node, as if each had just sent a heartbeat: after the
  // coordinator itself stalled, their silence was its own.
  void grace();
  // Nodes in a job whose progress has not advanced for more than max(min_quiet, factor x its
  // recent time per unit) become stalled; stalled ones that advanced again are not. Returns the
  // changes since the last call.
  std::vector<StallChange> stall_changes(std::chrono::milliseconds min_quiet, double factor);

  NodeInfo* find(NodeId id);
  std::vector<NodeId> free_nodes(proto::Role role) const;
  const std::map<NodeId, NodeInfo>& nodes() const { return nodes_; }

 private:
  std::chrono::milliseconds dead_after_;
  std::map<NodeId, NodeInfo> nodes_;
  uint32_t next_id_ = 1;
};

}  // namespace pstrain
