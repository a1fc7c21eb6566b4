#include "worker/dense_exchange.h"

namespace pstrain {

DenseExchange::DenseExchange(ServerChunks& servers) : servers_(servers), pushes_(servers, /*rows=*/nullptr) {}

void DenseExchange::gradients_ready(kj::WaitScope& wait_scope, const GradientSlice& slice, size_t final_from) {
  if (pushes_.push_from(final_from, slice) > 0) wait_scope.poll();  // let the event loop write them out
}

kj::Promise<void> DenseExchange::push_rest(const GradientSlice& slice) {
  return kj::joinPromises(pushes_.end_step(slice).releaseAsArray());
}

}  // namespace pstrain
