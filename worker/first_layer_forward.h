// The worker's side of the forward on the servers (docs/DESIGN-NOTES.md, "Forward on the
// servers"; Exchange::kForward): the next batch's first-layer inputs that go out with the first
// kernel's factor pushes, the partial products that come back, and whether the worker's own
// first-layer values are stale.
//
// A step's life: plan() (the next batch, when it is prefetched) or plan_none(); add_to_request()
// for each of the first kernel's factor groups and take_partial() for each reply; step_done()
// once all of the step's replies are in; then, before the next step's compute, use_for(), which
// hands the partials to the model if they are for that batch. Without partials the model computes
// the first layer itself, which is only right while its values are current: use_for() throws
// otherwise (a bug, not a condition to recover from).
//
// Thread rules: the training session's thread. The request buffers stay untouched until the
// step's replies are in (the messages point into them).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "common/base/aligned.h"
#include "common/engine/nn/data_parallel_model.h"
#include "common/rpc/proto/pstrain.capnp.h"
#include "worker/batch_decode.h"
#include "worker/factor_plan.h"

namespace pstrain {

class FirstLayerForward {
 public:
  // `servers`: of the job; `groups`: of the factor plan; what a batch holds for the model (its
  // input size and classes) and the model's batch.
  FirstLayerForward(size_t servers, size_t groups, BatchShape shape, size_t max_batch);

  // The next batch is `next` (decoded here): the step's first-layer pushes ask for partials.
  void plan(proto::Batch::Reader next);
  // No next batch known: the step's first-layer pushes ask for values.
  void plan_none() { next_examples_ = 0; }
  bool planned() const { return next_examples_ > 0; }

  // Adds the next batch's rows and inputs of factor group g (one of the first kernel's) to a
  // pushFactors request; returns the partial's floats to expect in the reply (0: no rows).
  size_t add_to_request(const FactorPlan& plan, size_t g, proto::ParameterServer::PushFactorsParams::Builder request,
                        const capnp::Orphanage& orphanage);
  // Takes a reply's partial product from `server` (checked: a partial, not values).
  void take_partial(uint32_t server, proto::ParameterServer::PushFactorsResults::Reader reply, size_t floats);
  // All of the step's replies are in.
  void step_done();
  // Before computing on batch (epoch, step): hands the partials to the model if they are for it.
  void use_for(uint64_t epoch, uint64_t step, nn::DataParallelModel<float>& model);

  // The worker's first-layer values are behind the servers' (an evaluation must not run).
  bool stale() const { return stale_; }
  uint64_t forwarded_steps() const { return forwarded_steps_; }

 private:
  struct GroupInputs {
    std::vector<uint32_t> rows;
    AlignedFloats inputs;
  };
  BatchShape shape_;
  AlignedFloats next_inputs_;  // the next batch, decoded
  std::vector<float> next_labels_;  // targets (batch_decode.h)
  size_t max_batch_;
  uint32_t next_examples_ = 0;
  uint64_t next_epoch_ = 0, next_step_ = 0;
  std::vector<GroupInputs> group_inputs_;  // by factor group
  std::vector<AlignedFloats> partials_;    // by server: out x examples; empty: that server adds nothing
  uint64_t partials_epoch_ = 0, partials_step_ = 0;
  bool partials_ready_ = false;
  bool stale_ = false;
  uint64_t forwarded_steps_ = 0;
};

}  // namespace pstrain
