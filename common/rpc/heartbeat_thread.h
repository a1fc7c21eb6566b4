// A node's heartbeats to the coordinator, sent from a thread of their own over a connection of
// their own, so that they never wait for the node's event loop: a worker computes its steps on
// that loop (a step of the TPU guide's CNN takes seconds, of a large model minutes), a server
// applies its updates there. A node that computes is alive; only a node that stops making
// progress while alive is in trouble, which is why every heartbeat carries the node's progress
// counter (steps for a worker, updates for a server): the coordinator reports a node whose
// progress stalls far beyond its own recent pace (docs/DESIGN-NOTES.md, "Liveness").
//
// The thread knows the node's id once CoordinatorLink has registered it (set_node). When the
// coordinator answers that it does not know the node (it restarted, or declared the node dead),
// the thread raises a flag that the link reads on its own loop to register again.
//
// Thread rules: the public methods may be called from any thread; the thread itself owns its
// event loop and connection. The destructor stops and joins it.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>

#include "common/rpc/rpc_util.h"

namespace pstrain::rpc {

class HeartbeatThread {
 public:
  // `progress` is read at every heartbeat; it must outlive the thread.
  HeartbeatThread(HostPort coordinator, ClusterCredential credential, const std::atomic<uint64_t>& progress);
  ~HeartbeatThread();
  HeartbeatThread(const HeartbeatThread&) = delete;
  HeartbeatThread& operator=(const HeartbeatThread&) = delete;

  // The node to beat for, every interval_ms; a reply later than reply_deadline_ms (the
  // coordinator's dead-after) drops the connection and the next beat connects again.
  void set_node(uint32_t node_id, uint32_t interval_ms, uint32_t reply_deadline_ms);
  // True once since the coordinator last answered that it does not know the node as registered
  // now: an answer about an earlier registration (a heartbeat with the old id, sent to a restarted
  // coordinator while the link registered again) is stale and never counts, whenever it lands.
  bool take_forgotten() {
    const uint64_t about = forgotten_.exchange(0);
    return about != 0 && about == registration_.load();
  }
  // Milliseconds since the coordinator last answered a heartbeat (or since set_node): over the
  // reply deadline, the coordinator is unreachable or silent, and the link connects again.
  int64_t silent_ms() const;
  // Heartbeats answered since start (tests).
  uint64_t answered() const { return answered_.load(); }

 private:
  void run();

  HostPort coordinator_;
  ClusterCredential credential_;
  const std::atomic<uint64_t>& progress_;
  std::atomic<uint32_t> node_id_{0}, interval_ms_{1000}, reply_deadline_ms_{10000};
  std::atomic<uint64_t> registration_{0};  // set_node calls: a "not known" answer to an older one is stale
  std::atomic<uint64_t> forgotten_{0};     // the registration a "not known" answer was about (0: none)
  std::atomic<bool> stopping_{false};
  std::atomic<uint64_t> answered_{0};
  std::atomic<int64_t> last_answer_ns_{0};  // steady clock
  std::thread thread_;
};

}  // namespace pstrain::rpc
