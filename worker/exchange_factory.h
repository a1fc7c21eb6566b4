// Picks a worker's parameter exchange (parameter_exchange.h) for a model and placement: the one
// place that knows every implementation, so the interface does not depend on them.
//
// Thread rules: a plain function; the exchange it makes follows parameter_exchange.h's.
#pragma once

#include <memory>

#include "common/engine/model_spec.h"
#include "common/engine/optim/optimizer_spec.h"
#include "common/engine/nn/data_parallel_model.h"
#include "worker/parameter_exchange.h"
#include "worker/server_chunks.h"

namespace pstrain {

// The exchange `kind` asks for, as far as the model and the placement allow it: the row-sparse
// part only when the model starts with a dense layer on the input (input_sparsity.h), factors
// only with one compute replica (`replicas`) and for kernels where they pay (factor_plan.h), and
// the forward on the servers only when the first layer's kernel (`first_kernel`: its layout
// index when its rows are grouped by server, else -1) is pushed as factors and row-sparse.
// With gradient clipping (`optimizer.clips()`), always the dense exchange, clipping.
std::unique_ptr<ParameterExchange> make_parameter_exchange(Exchange kind, int replicas, ServerChunks& servers,
                                                           nn::DataParallelModel<float>& model, const ModelSpec& spec,
                                                           const OptimizerSpec& optimizer, int first_kernel);

}  // namespace pstrain
