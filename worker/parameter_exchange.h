// How a worker exchanges gradients and parameter values with the servers during a step
// (docs/DESIGN-NOTES.md, "Distributed training"). Every step pushes, and so refreshes, every
// chunk: all of it, or with the row-sparse exchanges the rows the next step reads.
//
// A step's life, driven by the training session:
//   begin_step()        before the step's compute: plans its pushes and replies from its batch and
//                       the next one;
//   gradients_ready()   during backward, each time the gradients from some offset on are final:
//                       pushes them while the earlier layers compute;
//   push_rest()         the gradient is complete: pushes whatever is left; its promise resolves
//                       when the step's last reply is in;
//   take_values()       then: the replies' values become ServerChunks::values().
// Until take_values(), ServerChunks::values() stays the step's version, which a takeover of a
// lost worker's slice (step_values(), ServerChunks::push_without_values()) computes on.
//
// Implementations: DenseExchange, SparseExchange, FactoredExchange, and ForwardExchange, which
// decorates the factored one. make_parameter_exchange() (exchange_factory.h) picks one.
//
// Thread rules: the event loop's thread only (the session's). An exchange refers to the session's
// ServerChunks and model, which outlive it; its pushes point into the step's gradient (see
// ServerChunks), which the session leaves untouched until push_rest()'s promise resolves.
#pragma once

#include <kj/async.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/engine/model_spec.h"
#include "common/engine/nn/data_parallel_model.h"
#include "common/rpc/proto/pstrain.capnp.h"
#include "worker/server_chunks.h"

namespace pstrain {

// How a worker exchanges parameters and gradients with the servers (docs/DESIGN-NOTES.md).
enum class Exchange {
  kDense,     // whole chunks both ways
  kSparse,    // row-sparse pushes and replies of a dense first layer on sparse inputs (input_sparsity.h)
  kFactored,  // kSparse, and dense kernels pushed as factors where they are smaller (factor_plan.h)
  kForward,   // kFactored, and the servers compute the first layer's product for the next batch
              // (common/engine/nn/row_groups.h) and reply with it instead of that layer's values
};

class ParameterExchange {
 public:
  virtual ~ParameterExchange() noexcept(false) = default;  // (KJ promises may throw from destructors)

  // What the exchange does beyond whole chunks, for the session's first log line: ", row-sparse
  // exchange of the first layer" and the like; empty for the dense exchange.
  virtual std::string describe() const = 0;
  // The kernels whose gradients travel as factors (Model::compute_gradients's `factored`), or null.
  virtual const std::vector<bool>* factored_kernels() const = 0;

  // Before the step's compute on `batch`: `next` is the next step's batch when it is here already
  // (null when it is not, and before an evaluation, which reads every value).
  virtual void begin_step(proto::Batch::Reader batch, kj::Maybe<proto::Batch::Reader> next) = 0;
  // Backward has finished the gradients of `slice` from flat offset `final_from` on: pushes them,
  // and lets the event loop write them out if it pushed any.
  virtual void gradients_ready(kj::WaitScope& wait_scope, const GradientSlice& slice, size_t final_from) = 0;
  // Pushes every part of `slice` not pushed yet; resolves when every reply of the step is in.
  virtual kj::Promise<void> push_rest(const GradientSlice& slice) = 0;
  // Every reply of the step is in: their values become current.
  virtual void take_values() = 0;

  // Every value, current: what an evaluation after an epoch's last step computes on (that step's
  // replies were whole). Throws if some are not (a bug, not a condition to recover from).
  virtual const float* current_values() const = 0;
  // Every value of the current step's version, `step` (a takeover computes on them): the current
  // values, or a pull of that version when they are current only in some rows. May throw (a
  // server gone).
  virtual const float* step_values(kj::WaitScope& wait_scope, uint64_t step) = 0;
  // Steps in this session whose first-layer product the servers computed; nullopt when the
  // exchange does not do that.
  virtual std::optional<uint64_t> forwarded_steps() const = 0;
};

}  // namespace pstrain
