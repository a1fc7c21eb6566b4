#include "worker/dense_exchange.h"

#include "common/engine/nn/gradient_clipping.h"

namespace pstrain {

DenseExchange::DenseExchange(ServerChunks& servers, std::optional<OptimizerSpec> clipping)
    : servers_(servers), pushes_(servers, /*rows=*/nullptr), clipping_(std::move(clipping)) {}

void DenseExchange::gradients_ready(kj::WaitScope& wait_scope, const GradientSlice& slice, size_t final_from) {
  if (pushes_.push_from(final_from, slice) > 0) wait_scope.poll();  // let the event loop write them out
}

kj::Promise<void> DenseExchange::push_rest(const GradientSlice& slice) {
  auto replies = kj::joinPromises(pushes_.end_step(slice).releaseAsArray());
  if (!clipping_) return replies;
  return replies.then([this, version = slice.step + 1] {
    return servers_.pull_clipped(version, nn::clip_factors(*clipping_, servers_.chunks(), servers_.sum_squares()));
  });
}

}  // namespace pstrain
