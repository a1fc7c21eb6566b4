#include "worker/chunk_pushes.h"

#include <optional>

#include "common/rpc/message_limits.h"

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
  const size_t call = calls_.size();
  calls_.push_back(std::chrono::steady_clock::now());
  // Without a previous step to go by (the first), nothing waits.
  const bool overlap = call >= compute_left_.size() || compute_left_[call] >= kOverlapSeconds;
  size_t messages = 0;
  static const InputSparsity::Ranges kWhole = std::nullopt;
  order_.send_from(from, [&](size_t k) {
    const InputSparsity::Ranges& ranges = rows_ != nullptr ? rows_->push(k) : kWhole;
    const InputSparsity::Ranges& want = rows_ != nullptr ? rows_->reply(k) : kWhole;
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
    queued_[server].push_back({k, ranges, want});
    queued_bytes_[server] += bytes;
    if (queued_[server].size() == rpc::kMaxBatchedPushes) messages += send_queue(server, slice);
  });
  return messages + flush(overlap ? 0 : rpc::kBatchedPushBytes, slice);
}

size_t ChunkPushes::flush(size_t min_bytes, const GradientSlice& slice) {
  size_t messages = 0;
  for (uint32_t server = 0; server < queued_.size(); ++server) {
    if (queued_bytes_[server] >= min_bytes) messages += send_queue(server, slice);
  }
  return messages;
}

size_t ChunkPushes::send_queue(uint32_t server, const GradientSlice& slice) {
  auto& queue = queued_[server];
  if (queue.empty()) return 0;
  if (queue.size() == 1) {
    replies_.add(servers_.push(queue[0].chunk, slice, queue[0].ranges, queue[0].want));
  } else {
    replies_.add(servers_.push_batch(server, queue, slice));
  }
  queue.clear();
  queued_bytes_[server] = 0;
  return 1;
}

kj::Vector<kj::Promise<void>> ChunkPushes::end_step(const GradientSlice& slice) {
  push_from(0, slice);
  flush(0, slice);
  const auto end = std::chrono::steady_clock::now();
  compute_left_.clear();
  for (const auto& at : calls_) compute_left_.push_back(std::chrono::duration<double>(end - at).count());
  calls_.clear();
  order_.restart();
  auto replies = kj::mv(replies_);
  replies_ = kj::Vector<kj::Promise<void>>();
  return replies;
}

}  // namespace pstrain
