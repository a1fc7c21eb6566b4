// A training session's connections to the job's parameter servers, by index in the job's server
// list (a chunk's `server`), and the waits on them that end when the worker must stop.
//
// Thread rules: the event loop's thread only. Ownership: owns the connections; `stop` must
// outlive this.
#pragma once

#include <kj/async-io.h>

#include <string>
#include <vector>

#include "common/rpc/proto/pstrain.capnp.h"
#include "common/rpc/rpc_util.h"
#include "worker/stoppable_wait.h"

namespace pstrain {

class ServerConnections {
 public:
  ServerConnections(std::vector<std::string> addresses, kj::ForkedPromise<void>& stop)
      : addresses_(std::move(addresses)), stop_(stop) {}

  // Connects to every server, one after the other, proving `credential` on each.
  void connect(kj::WaitScope& wait_scope, kj::AsyncIoProvider& io, const rpc::ClusterCredential& credential) {
    for (const std::string& address : addresses_) {
      auto connection = wait_unless_stopped(
          rpc::connect(io, rpc::parse_host_port(address, 7100, "server address"), credential), stop_, wait_scope);
      servers_.push_back(connection->bootstrap().castAs<proto::ParameterServer>());
      connections_.push_back(kj::mv(connection));
    }
  }

  // In-process (tests): clients of servers in this process, one per address, instead of connect().
  void use(std::vector<proto::ParameterServer::Client> servers) {
    KJ_REQUIRE(servers.size() == addresses_.size(), "one server per address", servers.size(), addresses_.size());
    servers_ = std::move(servers);
  }

  size_t size() const { return addresses_.size(); }
  proto::ParameterServer::Client& operator[](size_t server) { return servers_[server]; }

  // Waits for `promise` unless the worker is told to stop first (then throws DISCONNECTED).
  template <typename T>
  T wait(kj::Promise<T>&& promise, kj::WaitScope& wait_scope) {
    return wait_unless_stopped(kj::mv(promise), stop_, wait_scope);
  }

 private:
  std::vector<std::string> addresses_;
  kj::ForkedPromise<void>& stop_;
  std::vector<kj::Own<rpc::Connection>> connections_;
  std::vector<proto::ParameterServer::Client> servers_;
};

}  // namespace pstrain
