#include "common/rpc/heartbeat_thread.h"

#include <kj/async-io.h>

#include <chrono>

#include "common/base/log.h"
#include "common/rpc/proto/pstrain.capnp.h"

namespace pstrain::rpc {

HeartbeatThread::HeartbeatThread(HostPort coordinator, ClusterCredential credential,
                                 const std::atomic<uint64_t>& progress)
    : coordinator_(std::move(coordinator)), credential_(std::move(credential)), progress_(progress) {
  thread_ = std::thread([this] { run(); });
}

HeartbeatThread::~HeartbeatThread() {
  stopping_ = true;
  thread_.join();
}

namespace {

int64_t steady_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace

int64_t HeartbeatThread::silent_ms() const { return (steady_ns() - last_answer_ns_.load()) / 1000000; }

void HeartbeatThread::set_node(uint32_t node_id, uint32_t interval_ms, uint32_t reply_deadline_ms) {
  last_answer_ns_ = steady_ns();
  interval_ms_ = interval_ms;
  reply_deadline_ms_ = reply_deadline_ms;
  node_id_ = node_id;
  ++registration_;
}

void HeartbeatThread::run() {
  auto io = kj::setupAsyncIo();
  auto& ws = io.waitScope;
  auto& timer = io.provider->getTimer();
  constexpr auto kSlice = 50 * kj::MILLISECONDS;  // how often the thread looks at stopping_
  // Waits `total`, looking at stopping_ every slice; false when stopping.
  const auto sleep = [&](kj::Duration total) {
    for (kj::Duration waited = 0 * kj::MILLISECONDS; waited < total && !stopping_; waited += kSlice) {
      timer.afterDelay(kSlice).wait(ws);
    }
    return !stopping_.load();
  };
  kj::Own<Connection> connection;
  // Bootstrapped once per connection: capnp 0.9.2's bootstrap() on a connection that has died
  // throws from a destructor while unwinding (a std::terminate); a call on the capability just fails.
  proto::Coordinator::Client coordinator = nullptr;
  bool broken = false;  // the connection failed: let go of it after a turn of the loop
  while (!stopping_) {
    if (broken) {
      coordinator = nullptr;
      connection = nullptr;
      broken = false;
    }
    const uint64_t registration = registration_.load();
    const uint32_t node = node_id_.load();
    if (node == 0) {
      if (!sleep(kSlice)) break;
      continue;
    }
    const auto started = std::chrono::steady_clock::now();
    try {
      if (!connection) {
        auto connecting = connect(*io.provider, coordinator_, credential_);
        while (!connecting.poll(ws)) {
          if (stopping_) return;
          timer.afterDelay(kSlice).wait(ws);
        }
        connection = connecting.wait(ws);
        coordinator = connection->bootstrap().castAs<proto::Coordinator>();
      }
      auto request = coordinator.heartbeatRequest();
      request.setNodeId(node);
      request.setProgress(progress_.load());
      auto reply = timer.timeoutAfter(reply_deadline_ms_.load() * kj::MILLISECONDS, request.send());
      while (!reply.poll(ws)) {
        if (stopping_) return;
        timer.afterDelay(kSlice).wait(ws);
      }
      auto response = reply.wait(ws);
      ++answered_;
      last_answer_ns_ = steady_ns();
      if (!response.getKnown()) forgotten_ = registration;  // take_forgotten() drops it if stale
    } catch (const kj::Exception& e) {
      // No coordinator, or no answer in time: connect again at the next beat. The node's link
      // finds out on its own connection whether it must register again.
      PSLOG(kDebug) << "heartbeat to " << coordinator_.str() << ": " << e.getDescription().cStr();
      broken = true;
    }
    const auto spent = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - started);
    const int64_t rest = static_cast<int64_t>(interval_ms_.load()) - spent.count();
    if (!sleep((rest > 0 ? rest : 0) * kj::MILLISECONDS)) break;
  }
}

}  // namespace pstrain::rpc
