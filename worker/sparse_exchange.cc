#include "worker/sparse_exchange.h"

#include <kj/debug.h>

namespace pstrain {

SparseExchange::SparseExchange(ServerChunks& servers, InputSparsity sparsity)
    : servers_(servers), rows_(std::move(sparsity), servers.chunks().size()), pushes_(servers, &rows_) {
  KJ_REQUIRE(rows_.active(), "the model allows no row-sparse exchange");
}

void SparseExchange::gradients_ready(kj::WaitScope& wait_scope, const GradientSlice& slice, size_t final_from) {
  if (pushes_.push_from(final_from, slice) > 0) wait_scope.poll();  // let the event loop write them out
}

kj::Promise<void> SparseExchange::push_rest(const GradientSlice& slice) {
  return kj::joinPromises(pushes_.end_step(slice).releaseAsArray());
}

}  // namespace pstrain
