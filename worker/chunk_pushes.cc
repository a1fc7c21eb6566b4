#include "worker/chunk_pushes.h"

#include <optional>

namespace pstrain {

ChunkPushes::ChunkPushes(ServerChunks& servers, std::vector<size_t> chunks, const StepRows* rows)
    : servers_(servers), rows_(rows), order_(servers.offsets(), std::move(chunks)) {}

ChunkPushes::ChunkPushes(ServerChunks& servers, const StepRows* rows)
    : servers_(servers), rows_(rows), order_(servers.offsets()) {}

size_t ChunkPushes::push_from(size_t from, const GradientSlice& slice) {
  return order_.send_from(from, [&](size_t k) {
    replies_.add(rows_ != nullptr ? servers_.push(k, slice, rows_->push(k), rows_->reply(k))
                                  : servers_.push(k, slice, std::nullopt, std::nullopt));
  });
}

kj::Vector<kj::Promise<void>> ChunkPushes::end_step(const GradientSlice& slice) {
  push_from(0, slice);
  order_.restart();
  auto replies = kj::mv(replies_);
  replies_ = kj::Vector<kj::Promise<void>>();
  return replies;
}

}  // namespace pstrain
