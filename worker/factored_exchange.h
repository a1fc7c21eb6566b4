// The factored exchange (Exchange::kFactored, `--exchange=factored`; docs/DESIGN-NOTES.md,
// "Factored exchange", factor_plan.h): the dense kernels the plan picks go as factors (the
// layer's output deltas and its nonzero input rows), one pushFactors call per kernel and server,
// as soon as backward finishes the kernel; every other chunk goes as a gradient (chunk_pushes.h).
// Both row-sparse where the model allows it (step_rows.h), whole otherwise.
//
// A factored group's reply brings its chunks' values, or, when a PartialProducts asks for it
// (the forward on the servers, forward_exchange.h), a partial product of the next batch instead.
//
// Thread rules and ownership: those of parameter_exchange.h. The factors are copied out of the
// model's last backward (a takeover may compute on the model while a push is still on its way
// out) into buffers of this class, which the messages point into until the step's replies are in.
#pragma once

#include <kj/async.h>

#include <optional>
#include <vector>

#include "common/base/aligned.h"
#include "worker/backward_order.h"
#include "worker/chunk_pushes.h"
#include "worker/factor_plan.h"
#include "worker/parameter_exchange.h"
#include "worker/step_rows.h"

namespace pstrain {

class FactoredExchange final : public ParameterExchange {
 public:
  // Asks, on some groups' pushes, for a partial product instead of values (the replies carry no
  // values of those groups' chunks then).
  class PartialProducts {
   public:
    virtual ~PartialProducts() noexcept(false) = default;
    // Adds to group g's request what the servers need for the partial product and returns the
    // floats to expect in the reply; nullptr: group g asks for values this time.
    virtual kj::Maybe<size_t> ask(size_t g, proto::ParameterServer::PushFactorsParams::Builder request,
                                  const capnp::Orphanage& orphanage) = 0;
    // Takes the partial product of a reply to group g's push.
    virtual void take(size_t g, proto::ParameterServer::PushFactorsResults::Reader reply, size_t floats) = 0;
  };

  // `plan` factors kernels only if the model has a single replica; `sparsity` may be inactive.
  FactoredExchange(ServerChunks& servers, const nn::DataParallelModel<float>& model, InputSparsity sparsity,
                   FactorPlan plan);

  const FactorPlan& plan() const { return plan_; }
  bool row_sparse() const { return rows_.active(); }
  // From now on `partials` (which outlives this) says which pushes ask for partial products.
  void ask_partials(PartialProducts* partials) { partials_ = partials; }

  std::string describe() const override;
  const std::vector<bool>* factored_kernels() const override;
  void begin_step(proto::Batch::Reader batch, kj::Maybe<proto::Batch::Reader> next) override {
    rows_.plan(batch, next);
  }
  void gradients_ready(kj::WaitScope& wait_scope, const GradientSlice& slice, size_t final_from) override;
  kj::Promise<void> push_rest(const GradientSlice& slice) override;
  void take_values() override { servers_.swap_values(); }
  const float* current_values() const override { return servers_.values(); }
  const float* step_values(kj::WaitScope& wait_scope, uint64_t step) override;
  std::optional<uint64_t> forwarded_steps() const override { return std::nullopt; }

 private:
  using PushFactorsRequest = ServerChunks::PushFactorsRequest;
  // Sends factor group g's pushFactors (its layer's backward must be done).
  void push_group(size_t g, const GradientSlice& slice);
  // Its reply: the rows the next step reads where the sparse plan knows them, else whole.
  kj::Promise<void> send_for_values(size_t g, PushFactorsRequest& request);
  kj::Promise<void> send_for_partial(size_t g, PushFactorsRequest& request, size_t partial_floats);

  ServerChunks& servers_;
  const nn::DataParallelModel<float>& model_;
  StepRows rows_;
  FactorPlan plan_;
  ChunkPushes chunk_pushes_;  // of the chunks outside the groups
  BackwardOrder group_order_;
  kj::Vector<kj::Promise<void>> group_replies_;  // of the current step
  // What each group sends (kept until its reply: the messages point into them).
  struct GroupBuffers {
    std::vector<uint32_t> rows;
    AlignedFloats inputs;
  };
  std::vector<GroupBuffers> group_buffers_;
  std::vector<AlignedFloats> deltas_;     // by layout parameter (factored kernels only)
  std::vector<uint64_t> deltas_round_;    // the exchange round deltas_[p] was copied in
  uint64_t round_ = 1;                    // steps' exchanges in this session
  PartialProducts* partials_ = nullptr;
};

}  // namespace pstrain
