// Keeps a node (server or worker) registered with the coordinator: connects, retrying with
// back-off; registers; heartbeats; and registers again when the coordinator has forgotten the
// node or the connection broke (a restarted coordinator).
//
// Thread rules: event-loop thread only. The object must outlive the promises it hands out.
#pragma once

#include <kj/async-io.h>

#include <functional>
#include <string>

#include "common/proto/pstrain.capnp.h"
#include "common/rpc/rpc_util.h"

namespace pstrain::rpc {

class CoordinatorLink {
 public:
  // `credential`: what the link proves on each connection (open: nothing; cluster_auth.h).
  CoordinatorLink(kj::AsyncIoProvider& io, HostPort coordinator, proto::Role role, std::string address,
                  std::string name, ClusterCredential credential = {});

  // Starts the connect/register/heartbeat loop. The promise resolves once the node is
  // registered for the first time.
  kj::Promise<void> start();

  proto::Coordinator::Client client() { return client_; }
  uint32_t node_id() const { return node_id_; }
  bool connected() const { return connected_; }
  // Called after every successful registration (the first and each later one).
  void on_registered(std::function<void(uint32_t node_id)> callback) { on_registered_ = std::move(callback); }

 private:
  kj::Promise<void> connect_and_register();
  kj::Promise<void> heartbeat_loop();
  kj::Promise<void> run_forever();

  kj::AsyncIoProvider& io_;
  HostPort coordinator_;
  proto::Role role_;
  std::string address_, name_;
  ClusterCredential credential_;
  std::string cpu_;  // describe_compute(), sent with every registration
  std::string last_auth_failure_;  // logged once until it changes
  kj::Own<Connection> connection_;
  proto::Coordinator::Client client_;
  uint32_t node_id_ = 0;
  uint32_t heartbeat_ms_ = 1000;
  uint32_t reply_deadline_ms_ = 10000;  // how long a heartbeat may wait for its reply
  uint32_t backoff_ms_ = 100;
  bool connected_ = false;
  kj::Own<kj::PromiseFulfiller<void>> first_registration_;
  std::function<void(uint32_t)> on_registered_;
  kj::Promise<void> loop_ = nullptr;
};

}  // namespace pstrain::rpc
