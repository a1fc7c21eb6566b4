#include "worker/chunk_pushes.h"

#include <optional>

#include "common/message_limits.h"

namespace pstrain {

ChunkPushes::ChunkPushes(ServerChunks& servers, std::vector<size_t> chunks, const StepRows* rows)
    : servers_(servers),
      rows_(rows),
      order_(servers.offsets(), std::move(chunks)),
      queued_(servers.server_count()),
      queued_bytes_(servers.server_count(), 0) {}

ChunkPushes::ChunkPushes(ServerChunks& servers, const StepRows* rows)
    : servers_(servers),
      rows_(rows),
      order_(servers.offsets()),
      queued_(servers.server_count()),
      queued_bytes_(servers.server_count(), 0) {}

size_t ChunkPushes::push_from(size_t from, const GradientSlice& slice) {
  size_t messages = 0;
  order_.send_from(from, [&](size_t k) {
    InputSparsity::Ranges ranges = rows_ != nullptr ? rows_->push(k) : std::nullopt;
    InputSparsity::Ranges want = rows_ != nullptr ? rows_->reply(k) : std::nullopt;
    size_t floats = servers_.chunks()[k].size;
    if (ranges) {
      floats = 0;
      for (const ChunkRange& r : *ranges) floats += r.size;
    }
    const size_t bytes = floats * sizeof(float);
    if (bytes >= rpc::kBatchedPushBytes) {
      replies_.add(servers_.push(k, slice, ranges, want));
      ++messages;
      return;
    }
    const uint32_t server = servers_.chunks()[k].server;
    queued_[server].push_back({k, std::move(ranges), std::move(want)});
    queued_bytes_[server] += bytes;
    if (queued_[server].size() == rpc::kMaxBatchedPushes) queued_bytes_[server] = rpc::kBatchedPushBytes;
  });
  return messages + flush(rpc::kBatchedPushBytes, slice);
}

size_t ChunkPushes::flush(size_t min_bytes, const GradientSlice& slice) {
  size_t messages = 0;
  for (uint32_t server = 0; server < queued_.size(); ++server) {
    auto& queue = queued_[server];
    if (queue.empty() || queued_bytes_[server] < min_bytes) continue;
    if (queue.size() == 1) {
      replies_.add(servers_.push(queue[0].chunk, slice, queue[0].ranges, queue[0].want));
    } else {
      replies_.add(servers_.push_batch(server, queue, slice));
    }
    ++messages;
    queue.clear();
    queued_bytes_[server] = 0;
  }
  return messages;
}

kj::Vector<kj::Promise<void>> ChunkPushes::end_step(const GradientSlice& slice) {
  push_from(0, slice);
  flush(0, slice);
  order_.restart();
  auto replies = kj::mv(replies_);
  replies_ = kj::Vector<kj::Promise<void>>();
  return replies;
}

}  // namespace pstrain
