#include "common/rpc/heartbeat_thread.h"

#include <kj/async-io.h>

#include <chrono>

#include "common/log.h"
#include "common/proto/pstrain.capnp.h"

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

void HeartbeatThread::set_node(uint32_t node_id, uint32_t interval_ms, uint32_t reply_deadline_ms) {
  interval_ms_ = interval_ms;
  reply_deadline_ms_ = reply_deadline_ms;
  node_id_ = node_id;
}

void HeartbeatThread::run() {
  auto io = kj::setupAsyncIo();
  auto& ws = io.waitScope;
  auto& timer = io.provider->getTimer();
  constexpr auto kSlice = 50 * kj::MILLISECONDS;  // how often the thread looks at stopping_
  // Waits until `done` or stopping; false when stopping.
  const auto sleep = [&](kj::Duration total) {
    for (kj::Duration waited = 0 * kj::MILLISECONDS; waited < total && !stopping_; waited += kSlice) {
      timer.afterDelay(kSlice).wait(ws);
    }
    return !stopping_.load();
  };
  kj::Own<Connection> connection;
  while (!stopping_) {
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
      }
      auto request = connection->bootstrap().castAs<proto::Coordinator>().heartbeatRequest();
      request.setNodeId(node);
      request.setProgress(progress_.load());
      auto reply = timer.timeoutAfter(reply_deadline_ms_.load() * kj::MILLISECONDS, request.send());
      while (!reply.poll(ws)) {
        if (stopping_) return;
        timer.afterDelay(kSlice).wait(ws);
      }
      auto response = reply.wait(ws);
      ++answered_;
      if (!response.getKnown() && node == node_id_.load()) forgotten_ = true;
    } catch (const kj::Exception& e) {
      // No coordinator, or no answer in time: connect again at the next beat. The node's link
      // finds out on its own connection whether it must register again.
      PSLOG(kDebug) << "heartbeat to " << coordinator_.str() << ": " << e.getDescription().cStr();
      connection = nullptr;
    }
    const auto spent = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - started);
    const int64_t rest = static_cast<int64_t>(interval_ms_.load()) - spent.count();
    if (!sleep((rest > 0 ? rest : 0) * kj::MILLISECONDS)) break;
  }
}

}  // namespace pstrain::rpc
