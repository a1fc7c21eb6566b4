#include "worker/first_layer_forward.h"

#include <kj/debug.h>

#include <algorithm>

#include "common/rpc/rpc_util.h"
#include "worker/batch_decode.h"

namespace pstrain {

FirstLayerForward::FirstLayerForward(size_t servers, size_t groups, BatchShape shape, size_t max_batch)
    : shape_(shape),
      next_inputs_(shape.example_size * max_batch),
      next_labels_(max_batch * std::max<size_t>(shape.targets, 1)),
      max_batch_(max_batch),
      group_inputs_(groups),
      partials_(servers) {}

void FirstLayerForward::plan(proto::Batch::Reader next) {
  KJ_REQUIRE(next.getSize() <= max_batch_, "batch larger than the model's batch", next.getSize());
  decode_batch(next, shape_, next_inputs_.data(), next_labels_.data());
  next_examples_ = next.getSize();
  next_epoch_ = next.getEpoch();
  next_step_ = next.getStep();
}

size_t FirstLayerForward::add_to_request(const FactorPlan& plan, size_t g,
                                         proto::ParameterServer::PushFactorsParams::Builder request,
                                         const capnp::Orphanage& orphanage) {
  const FactorPlan::Group& group = plan.groups()[g];
  GroupInputs& next = group_inputs_[g];
  plan.gather_inputs(group, next_inputs_.data(), next_examples_, next.rows, next.inputs);
  auto forward = request.getNext().initForward();
  forward.setExamples(next_examples_);
  auto rows = forward.initRows(static_cast<unsigned>(next.rows.size()));
  for (unsigned i = 0; i < next.rows.size(); ++i) rows.set(i, next.rows[i]);
  const size_t input_floats = next.rows.size() * next_examples_;
  // Zero-copy: `next` stays untouched until the step's replies are in.
  if (input_floats > 0) forward.adoptInputs(rpc::reference_floats(orphanage, {next.inputs.data(), input_floats}));
  return next.rows.empty() ? 0 : group.columns * next_examples_;
}

void FirstLayerForward::take_partial(uint32_t server, proto::ParameterServer::PushFactorsResults::Reader reply,
                                     size_t floats) {
  KJ_REQUIRE(reply.getReply().isPartial(),
             "the server replied with values, not the partial product asked for (a server without the forward on "
             "the servers?)");
  // No rows of the next batch on this server: it adds nothing (and sends nothing).
  AlignedFloats& partial = partials_.at(server);
  partial.clear();
  if (floats > 0) {
    const auto values = rpc::part_view(reply.getReply().getPartial(), floats, "partial product");
    partial.assign(values.begin(), values.end());
  }
}

void FirstLayerForward::step_done() {
  // The first layer's replies carried partial products for the next batch, or values.
  const bool forwarded = next_examples_ > 0;
  partials_ready_ = forwarded;
  partials_epoch_ = next_epoch_;
  partials_step_ = next_step_;
  stale_ = forwarded;
  forwarded_steps_ += forwarded ? 1 : 0;
}

void FirstLayerForward::use_for(uint64_t epoch, uint64_t step, nn::DataParallelModel<float>& model) {
  const bool usable = partials_ready_ && partials_epoch_ == epoch && partials_step_ == step;
  KJ_REQUIRE(usable || !stale_, "the first layer's values are stale and no partial products are here", epoch, step);
  if (usable) {
    std::vector<const float*> by_server;
    for (const AlignedFloats& p : partials_) by_server.push_back(p.empty() ? nullptr : p.data());
    model.use_first_layer_partials(std::move(by_server));
  }
  partials_ready_ = false;
}

}  // namespace pstrain
