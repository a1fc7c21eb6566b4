#include "common/rpc/coordinator_link.h"

#include "common/compute_threads.h"
#include "common/log.h"

namespace pstrain::rpc {

CoordinatorLink::CoordinatorLink(kj::AsyncIoProvider& io, HostPort coordinator, proto::Role role,
                                 std::string address, std::string name, ClusterCredential credential)
    : io_(io),
      coordinator_(std::move(coordinator)),
      role_(role),
      address_(std::move(address)),
      name_(std::move(name)),
      credential_(std::move(credential)),
      cpu_(describe_compute()),
      client_(nullptr) {}

kj::Promise<void> CoordinatorLink::start() {
  auto paf = kj::newPromiseAndFulfiller<void>();
  first_registration_ = kj::mv(paf.fulfiller);
  loop_ = run_forever().eagerlyEvaluate([](kj::Exception&& e) { PSLOG(kError) << "coordinator link: " << e.getDescription().cStr(); });
  return kj::mv(paf.promise);
}

kj::Promise<void> CoordinatorLink::connect_and_register() {
  return connect(io_, coordinator_, credential_).then([this](kj::Own<Connection> connection) {
    connection_ = kj::mv(connection);
    client_ = connection_->bootstrap().castAs<proto::Coordinator>();
    auto request = client_.registerRequest();
    request.setRole(role_);
    request.setAddress(address_);
    request.setName(name_);
    request.setCpu(cpu_);
    return request.send().then([this](capnp::Response<proto::Coordinator::RegisterResults>&& response) {
      node_id_ = response.getNodeId();
      heartbeat_ms_ = std::max<uint32_t>(50, response.getHeartbeatMs());
      // A heartbeat's reply may be late (a slow or congested link) without the coordinator having
      // given up on this node: wait as long as it does before dropping the connection.
      reply_deadline_ms_ = std::max<uint32_t>(10 * heartbeat_ms_, response.getDeadAfterMs());
      connected_ = true;
      backoff_ms_ = 100;
      PSLOG(kInfo) << "registered with the coordinator at " << coordinator_.str() << " as node " << node_id_
                   << " (" << cpu_ << ")";
      if (on_registered_) on_registered_(node_id_);
      if (first_registration_ && first_registration_->isWaiting()) first_registration_->fulfill();
    });
  });
}

kj::Promise<void> CoordinatorLink::heartbeat_loop() {
  return io_.getTimer().afterDelay(heartbeat_ms_ * kj::MILLISECONDS).then([this] {
    auto request = client_.heartbeatRequest();
    request.setNodeId(node_id_);
    // The deadline covers this one heartbeat only; the loop continues after it.
    auto reply = request.send().then([](capnp::Response<proto::Coordinator::HeartbeatResults>&& r) { return r.getKnown(); });
    return io_.getTimer()
        .timeoutAfter(reply_deadline_ms_ * kj::MILLISECONDS, kj::mv(reply))
        .then([this](bool known) -> kj::Promise<void> {
          if (!known) {
            PSLOG(kWarning) << "the coordinator does not know node " << node_id_ << "; registering again";
            connected_ = false;
            return kj::READY_NOW;  // run_forever registers again
          }
          return heartbeat_loop();
        });
  });
}

kj::Promise<void> CoordinatorLink::run_forever() {
  return connect_and_register()
      .then([this] { return heartbeat_loop(); })
      .catch_([this](kj::Exception&& e) {
        if (is_auth_failure(e)) {
          // A wrong or missing secret: say so (once per distinct reason), and keep trying: the
          // operator may fix the coordinator's side.
          const std::string why = e.getDescription().cStr();
          if (why != last_auth_failure_) {
            PSLOG(kError) << "the coordinator at " << coordinator_.str() << " did not let this node in: " << why;
            last_auth_failure_ = why;
          }
        } else if (connected_) {
          PSLOG(kWarning) << "lost the coordinator at " << coordinator_.str() << ": " << e.getDescription().cStr();
        } else {
          PSLOG(kDebug) << "cannot reach the coordinator at " << coordinator_.str() << ": " << e.getDescription().cStr();
        }
        connected_ = false;
      })
      .then([this] {
        const uint32_t delay = backoff_ms_;
        backoff_ms_ = std::min<uint32_t>(backoff_ms_ * 2, 2000);
        return io_.getTimer().afterDelay(delay * kj::MILLISECONDS);
      })
      .then([this] { return run_forever(); });
}

}  // namespace pstrain::rpc
