// The row-sparse exchange (Exchange::kSparse, `--exchange=sparse`; docs/DESIGN-NOTES.md, "Sparse
// exchange"): like the dense one, but of the first layer's kernel a push carries only the rows
// the step's batch touches, and its reply only the rows the next step's batch touches
// (step_rows.h). For models that start with a dense layer on the input only (make_parameter_exchange
// falls back to the dense exchange otherwise).
//
// values() is then current only in the rows the step reads: a takeover pulls the step's version.
//
// Thread rules and ownership: those of parameter_exchange.h.
#pragma once

#include "worker/chunk_pushes.h"
#include "worker/parameter_exchange.h"
#include "worker/step_rows.h"

namespace pstrain {

class SparseExchange final : public ParameterExchange {
 public:
  // `sparsity` must be active.
  SparseExchange(ServerChunks& servers, InputSparsity sparsity);

  std::string describe() const override { return rows_.describe(); }
  const std::vector<bool>* factored_kernels() const override { return nullptr; }
  void begin_step(proto::Batch::Reader batch, kj::Maybe<proto::Batch::Reader> next) override {
    rows_.plan(batch, next);
  }
  void gradients_ready(kj::WaitScope& wait_scope, const GradientSlice& slice, size_t final_from) override;
  kj::Promise<void> push_rest(const GradientSlice& slice) override;
  void take_values() override { servers_.swap_values(); }
  const float* current_values() const override { return servers_.values(); }
  const float* step_values(kj::WaitScope& wait_scope, uint64_t step) override {
    return servers_.pull_exact(wait_scope, step);
  }
  std::optional<uint64_t> forwarded_steps() const override { return std::nullopt; }

 private:
  ServerChunks& servers_;
  StepRows rows_;
  ChunkPushes pushes_;  // of every chunk, as rows_ plans
};

}  // namespace pstrain
