#include "common/rpc/coordinator_link.h"

#include <random>

#include "common/engine/compute_threads.h"
#include "common/base/log.h"

namespace pstrain::rpc {

namespace {

const std::atomic<uint64_t> kNoProgress{0};

uint64_t random_incarnation() {
  std::random_device device;
  return (uint64_t{device()} << 32 | device()) | 1;  // never 0 (0: "not said")
}

}  // namespace

CoordinatorLink::CoordinatorLink(kj::AsyncIoProvider& io, HostPort coordinator, proto::Role role,
                                 std::string address, std::string name, ClusterCredential credential,
                                 const std::atomic<uint64_t>* progress)
    : io_(io),
      coordinator_(std::move(coordinator)),
      role_(role),
      address_(std::move(address)),
      name_(std::move(name)),
      credential_(std::move(credential)),
      cpu_(describe_compute()),
      incarnation_(random_incarnation()),
      client_(nullptr),
      heartbeats_(std::make_unique<HeartbeatThread>(coordinator_, credential_,
                                                    progress != nullptr ? *progress : kNoProgress)) {}

CoordinatorLink::~CoordinatorLink() = default;

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
    request.setIncarnation(incarnation_);
    return request.send().then([this](capnp::Response<proto::Coordinator::RegisterResults>&& response) {
      node_id_ = response.getNodeId();
      heartbeat_ms_ = std::max<uint32_t>(50, response.getHeartbeatMs());
      // A heartbeat's reply may be late (a slow or congested link) without the coordinator having
      // given up on this node: wait as long as it does before dropping the connection.
      reply_deadline_ms_ = std::max<uint32_t>(10 * heartbeat_ms_, response.getDeadAfterMs());
      connected_ = true;
      backoff_ms_ = 100;
      heartbeats_->set_node(node_id_, heartbeat_ms_, reply_deadline_ms_);
      PSLOG(kInfo) << "registered with the coordinator at " << coordinator_.str() << " as node " << node_id_
                   << " (" << cpu_ << ")";
      if (on_registered_) on_registered_(node_id_);
      if (first_registration_ && first_registration_->isWaiting()) first_registration_->fulfill();
    });
  });
}

kj::Promise<void> CoordinatorLink::watch_registration() {
  // No deadline here: this loop may be held up by the node's compute for minutes, and a late
  // timer must not read as a silent coordinator (the heartbeat thread keeps the node alive and
  // says when the coordinator is silent). A heartbeat on this connection too, with no timeout:
  // it fails at once when the connection is gone (a restarted coordinator), and a stalled
  // coordinator answers it when it runs again (dropping the connection would end a worker's
  // session on it). While it waits, what the heartbeat thread hears is read every beat: a
  // coordinator that forgot this node (declared it dead during a partition) is registered with
  // again at once, on a new connection, not when TCP's backed-off retransmission on this one
  // gets through, seconds after the partition healed.
  return io_.getTimer().afterDelay(heartbeat_ms_ * kj::MILLISECONDS).then([this]() -> kj::Promise<void> {
    if (heartbeats_->take_forgotten()) return registered_again();
    if (const int64_t silent = heartbeats_->silent_ms(); silent > reply_deadline_ms_) {
      // Unreachable or silent (a partition, a stalled coordinator): connect again. The same
      // incarnation keeps this node's id if the coordinator still counts it alive.
      return KJ_EXCEPTION(DISCONNECTED, "no answer to heartbeats", silent);
    }
    auto request = client_.heartbeatRequest();
    request.setNodeId(node_id_);
    auto known = request.send().then([](capnp::Response<proto::Coordinator::HeartbeatResults>&& r) { return r.getKnown(); });
    return known.exclusiveJoin(forgotten()).then([this](bool known) -> kj::Promise<void> {
      if (!known) return registered_again();
      return watch_registration();
    });
  });
}

kj::Promise<void> CoordinatorLink::registered_again() {
  PSLOG(kWarning) << "the coordinator does not know node " << node_id_ << "; registering again";
  connected_ = false;
  return kj::READY_NOW;  // run_forever registers again, on a new connection
}

kj::Promise<bool> CoordinatorLink::forgotten() {
  if (heartbeats_->take_forgotten()) return false;
  return io_.getTimer().afterDelay(heartbeat_ms_ * kj::MILLISECONDS).then([this] { return forgotten(); });
}

kj::Promise<void> CoordinatorLink::run_forever() {
  return connect_and_register()
      .then([this] { return watch_registration(); })
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
