// The forward on the servers (Exchange::kForward, the default; docs/DESIGN-NOTES.md, "Forward on
// the servers"): the factored exchange, decorated. With the first kernel's factor pushes go the
// next batch's first-layer inputs, and each server replies with its rows' partial product for
// that batch instead of their values; the model takes the partials instead of computing the
// first layer (first_layer_forward.h holds the buffers and the staleness rule). Everything else
// is the factored exchange's.
//
// Thread rules and ownership: those of parameter_exchange.h. Owns the factored exchange; refers
// to the model, which it hands the partials before each step's compute.
#pragma once

#include <memory>

#include "worker/factored_exchange.h"
#include "worker/first_layer_forward.h"

namespace pstrain {

class ForwardExchange final : public ParameterExchange, private FactoredExchange::PartialProducts {
 public:
  // `factored` must push kernel `first_kernel` (the first layer's, its rows grouped by server) as
  // factors, row-sparse (make_parameter_exchange checks).
  ForwardExchange(std::unique_ptr<FactoredExchange> factored, nn::DataParallelModel<float>& model,
                  size_t first_kernel, size_t servers);

  std::string describe() const override {
    return factored_->describe() + ", the first layer's forward on the servers";
  }
  const std::vector<bool>* factored_kernels() const override { return factored_->factored_kernels(); }
  // Also hands the model the partial products of `batch` when the last step's replies had them.
  void begin_step(proto::Batch::Reader batch, kj::Maybe<proto::Batch::Reader> next) override;
  void gradients_ready(kj::WaitScope& wait_scope, const GradientSlice& slice, size_t final_from) override {
    factored_->gradients_ready(wait_scope, slice, final_from);
  }
  kj::Promise<void> push_rest(const GradientSlice& slice) override { return factored_->push_rest(slice); }
  void take_values() override;
  // Throws while the first layer's values are stale (the last step's replies had partials).
  const float* current_values() const override;
  const float* step_values(kj::WaitScope& wait_scope, uint64_t step) override {
    return factored_->step_values(wait_scope, step);
  }
  std::optional<uint64_t> forwarded_steps() const override { return forward_.forwarded_steps(); }

 private:
  // FactoredExchange::PartialProducts: the first kernel's groups, when the next batch is known.
  kj::Maybe<size_t> ask(size_t g, proto::ParameterServer::PushFactorsParams::Builder request,
                        const capnp::Orphanage& orphanage) override;
  void take(size_t g, proto::ParameterServer::PushFactorsResults::Reader reply, size_t floats) override;

  std::unique_ptr<FactoredExchange> factored_;
  nn::DataParallelModel<float>& model_;
  size_t first_kernel_;
  FirstLayerForward forward_;
};

}  // namespace pstrain
