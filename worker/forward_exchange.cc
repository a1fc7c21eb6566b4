#include "worker/forward_exchange.h"

#include <kj/debug.h>

namespace pstrain {

ForwardExchange::ForwardExchange(std::unique_ptr<FactoredExchange> factored, nn::DataParallelModel<float>& model,
                                 size_t first_kernel, size_t servers)
    : factored_(std::move(factored)),
      model_(model),
      first_kernel_(first_kernel),
      forward_(servers, factored_->plan().groups().size(),
               model_batch_shape(model.first_replica().loss(), model.input_size(), model.output_size()),
               static_cast<size_t>(model.max_batch())) {
  factored_->ask_partials(this);
}

void ForwardExchange::begin_step(proto::Batch::Reader batch, kj::Maybe<proto::Batch::Reader> next) {
  factored_->begin_step(batch, next);
  forward_.plan_none();
  KJ_IF_MAYBE(n, next) { forward_.plan(*n); }
  if (batch.getSize() > 0) forward_.use_for(batch.getEpoch(), batch.getStep(), model_);
}

void ForwardExchange::take_values() {
  factored_->take_values();
  forward_.step_done();
}

const float* ForwardExchange::current_values() const {
  KJ_REQUIRE(!forward_.stale(), "evaluation on a stale first layer");
  return factored_->current_values();
}

kj::Maybe<size_t> ForwardExchange::ask(size_t g, proto::ParameterServer::PushFactorsParams::Builder request,
                                       const capnp::Orphanage& orphanage) {
  if (!forward_.planned() || factored_->plan().groups()[g].param != first_kernel_) return nullptr;
  return forward_.add_to_request(factored_->plan(), g, request, orphanage);
}

void ForwardExchange::take(size_t g, proto::ParameterServer::PushFactorsResults::Reader reply, size_t floats) {
  forward_.take_partial(factored_->plan().groups()[g].server, reply, floats);
}

}  // namespace pstrain
