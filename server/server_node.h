// A parameter server as pstrain-server runs it: the RocksDB directory of its backups, the store
// thread, the ParameterServer RPC service on a listening socket, and the link that keeps it
// registered with the coordinator. server_main.cc runs one per process; tests run several, each
// on a thread of its own (tests/coordinator/inprocess_cluster.h).
//
// Thread rules: run_server_node() runs on the calling thread's event loop and returns once the
// node has stopped; everything it builds lives on that thread and is gone when it returns.
#pragma once

#include <kj/async-io.h>

#include <cstdint>
#include <functional>
#include <string>

#include "common/rpc/rpc_util.h"

namespace pstrain {

struct ServerNodeConfig {
  rpc::HostPort listen;        // port 0: any free port
  std::string advertise_host;  // workers reach the server at advertise_host:<listening port>
  rpc::HostPort coordinator;
  // A restarted server keeps its name and data directory: that is how the coordinator knows it
  // is the same server with the same backups.
  std::string name;
  std::string data_dir;  // RocksDB directory of the backups (created if missing)
  // On a preemption, how long the server waits for the coordinator's backup before it leaves.
  kj::Duration preemption_timeout = 20 * kj::SECONDS;
  // Proved by every RPC connection, both ways: clients of this server, and its link to the
  // coordinator (open: none).
  rpc::ClusterCredential cluster;
  // Also listen on the same-host socket named after the TCP address (common/rpc/same_host.h):
  // peers in this network namespace then skip loopback TCP (docs/DESIGN-NOTES.md, "Same-host
  // sockets").
  bool same_host_socket = true;
};

// Runs a parameter server until `stop` resolves; calls `ready(port)` once it listens (it
// registers with the coordinator from then on, retrying until it can). NodeStop::kNow returns at
// once; kPreempted first tells the coordinator, which has every server of the node's jobs back
// up at the next step, and waits (up to preemption_timeout) until that backup is complete, this
// server's part included. Throws pstrain::Error if the data directory cannot be opened, or if
// another process holds the same-host socket's name (rpc::listen_same_host).
void run_server_node(kj::AsyncIoContext& io, const ServerNodeConfig& config, kj::Promise<rpc::NodeStop> stop,
                     const std::function<void(uint32_t port)>& ready);

}  // namespace pstrain
