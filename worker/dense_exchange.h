// The dense exchange (Exchange::kDense, `--exchange=dense`): each chunk's gradient is pushed whole
// as soon as backward finishes it, and each reply brings the chunk's values back whole, so every
// value is current after every step. Also what a worker does when the model allows nothing else.
//
// With gradient clipping (optimizer.clipnorm / global_clipnorm; DESIGN-NOTES "Gradient
// clipping"), the replies bring each chunk's sum of squares instead of values (the servers hold
// the summed step); once all are in, the worker computes every chunk's clip factor
// (nn::clip_factors, the same on every worker) and pulls the values with it, which applies the
// step: one more round trip per step.
//
// Thread rules and ownership: those of parameter_exchange.h.
#pragma once

#include <optional>

#include "common/engine/optim/optimizer_spec.h"
#include "worker/chunk_pushes.h"
#include "worker/parameter_exchange.h"

namespace pstrain {

class DenseExchange final : public ParameterExchange {
 public:
  explicit DenseExchange(ServerChunks& servers, std::optional<OptimizerSpec> clipping = std::nullopt);

  std::string describe() const override { return clipping_ ? ", gradient clipping (values pulled with the clip factors)" : ""; }
  const std::vector<bool>* factored_kernels() const override { return nullptr; }
  void begin_step(proto::Batch::Reader, kj::Maybe<proto::Batch::Reader>) override {}
  void gradients_ready(kj::WaitScope& wait_scope, const GradientSlice& slice, size_t final_from) override;
  kj::Promise<void> push_rest(const GradientSlice& slice) override;
  void take_values() override { servers_.swap_values(); }
  const float* current_values() const override { return servers_.values(); }
  const float* step_values(kj::WaitScope&, uint64_t) override { return servers_.values(); }
  std::optional<uint64_t> forwarded_steps() const override { return std::nullopt; }

 private:
  ServerChunks& servers_;
  ChunkPushes pushes_;  // of every chunk, whole
  std::optional<OptimizerSpec> clipping_;  // its clipnorm or global_clipnorm
};

}  // namespace pstrain
