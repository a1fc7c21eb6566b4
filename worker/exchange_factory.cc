#include "worker/exchange_factory.h"

#include <algorithm>

#include "worker/dense_exchange.h"
#include "worker/factored_exchange.h"
#include "worker/forward_exchange.h"
#include "worker/sparse_exchange.h"

namespace pstrain {

std::unique_ptr<ParameterExchange> make_parameter_exchange(Exchange kind, int replicas, ServerChunks& servers,
                                                           nn::DataParallelModel<float>& model, const ModelSpec& spec,
                                                           const OptimizerSpec& optimizer, int first_kernel) {
  if (optimizer.clips()) return std::make_unique<DenseExchange>(servers, optimizer);
  InputSparsity sparsity(spec, model.layout(), servers.chunks());
  if (kind == Exchange::kDense || (kind == Exchange::kSparse && !sparsity.active())) {
    return std::make_unique<DenseExchange>(servers);
  }
  if (kind == Exchange::kSparse) return std::make_unique<SparseExchange>(servers, std::move(sparsity));
  auto factored = std::make_unique<FactoredExchange>(
      servers, model, std::move(sparsity),
      FactorPlan(model.layout(), servers.chunks(), model.max_batch(), /*enabled=*/replicas == 1,
                 [&model](size_t p) { return model.first_replica().is_dense_kernel(p); }));
  const auto& groups = factored->plan().groups();
  const bool first_kernel_factored = std::any_of(groups.begin(), groups.end(), [&](const FactorPlan::Group& g) {
    return static_cast<int>(g.param) == first_kernel;
  });
  if (kind == Exchange::kFactored || !factored->row_sparse() || first_kernel < 0 || !first_kernel_factored) {
    return factored;
  }
  return std::make_unique<ForwardExchange>(std::move(factored), model, static_cast<size_t>(first_kernel),
                                           servers.server_count());
}

}  // namespace pstrain
