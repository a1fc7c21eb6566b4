// Keeps a node (server or worker) registered with the coordinator: connects, retrying with
// back-off; registers; and registers again when the coordinator has forgotten the node or the
// connection broke (a restarted coordinator). Heartbeats go from a thread of their own
// (heartbeat_thread.h), so they never wait for this loop: a worker computes its steps on it, a
// server its updates. Every registration carries the process's incarnation, so registering again
// after a broken connection or a stalled coordinator keeps the node's id (DESIGN-NOTES
// "Liveness").
//
// Thread rules: event-loop thread only (the heartbeat thread is its own). The object must outlive
// the promises it hands out.
#pragma once

#include <kj/async-io.h>

#include <atomic>
#include <functional>
#include <memory>
#include <string>

#include "common/rpc/proto/pstrain.capnp.h"
#include "common/rpc/heartbeat_thread.h"
#include "common/rpc/rpc_util.h"

namespace pstrain::rpc {

class CoordinatorLink {
 public:
  // `credential`: what the link proves on each connection (open: nothing; cluster_auth.h).
  // `progress` (may be null: always 0) is the node's count of finished work, which every
  // heartbeat carries; it must outlive the link.
  CoordinatorLink(kj::AsyncIoProvider& io, HostPort coordinator, proto::Role role, std::string address,
                  std::string name, ClusterCredential credential = {},
                  const std::atomic<uint64_t>* progress = nullptr);
  ~CoordinatorLink();

  // Starts the connect/register/heartbeat loop. The promise resolves once the node is
  // registered for the first time.
  kj::Promise<void> start();

  proto::Coordinator::Client client() { return client_; }
  uint32_t node_id() const { return node_id_; }
  // This process's random incarnation, sent with every registration (and with the calls that
  // must come from the node that holds node_id(): getAssignment).
  uint64_t incarnation() const { return incarnation_; }
  bool connected() const { return connected_; }
  // Called after every successful registration (the first and each later one).
  void on_registered(std::function<void(uint32_t node_id)> callback) { on_registered_ = std::move(callback); }

 private:
  kj::Promise<void> connect_and_register();
  // Until the connection breaks or the heartbeat thread hears that the coordinator forgot us.
  kj::Promise<void> watch_registration();
  // Resolves (false: "not known") once the heartbeat thread heard that the coordinator forgot
  // this node; looks every beat while the link's own heartbeat waits for its reply.
  kj::Promise<bool> forgotten();
  kj::Promise<void> registered_again();  // logs it; run_forever then registers again
  kj::Promise<void> run_forever();

  kj::AsyncIoProvider& io_;
  HostPort coordinator_;
  proto::Role role_;
  std::string address_, name_;
  ClusterCredential credential_;
  std::string cpu_;  // describe_compute(), sent with every registration
  uint64_t incarnation_;  // random, this process's
  std::string last_auth_failure_;  // logged once until it changes
  kj::Own<Connection> connection_;
  proto::Coordinator::Client client_;
  uint32_t node_id_ = 0;
  uint32_t heartbeat_ms_ = 1000;
  uint32_t reply_deadline_ms_ = 10000;  // how long a heartbeat may wait for its reply (the thread's)
  uint32_t backoff_ms_ = 100;
  bool connected_ = false;
  kj::Own<kj::PromiseFulfiller<void>> first_registration_;
  std::function<void(uint32_t)> on_registered_;
  kj::Promise<void> loop_ = nullptr;
  std::unique_ptr<HeartbeatThread> heartbeats_;
};

}  // namespace pstrain::rpc
