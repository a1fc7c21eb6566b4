// A training session's orders from the coordinator, and the slices of a step that are not this
// worker's own: the watch call that brings a takeover of a lost worker's slice of the step or a
// pause for an async cut; the sync extra slices (Assignment.extraSlices) a worker computes each
// step for lost workers no free worker replaced; and the end of a step, where a takeover fits in.
//
// Thread rules: the session's thread only. Ownership: owns the takeover's and the extra slices'
// buffers (a push reads its gradient until the reply is in); refers to the session's facts,
// waits, model, servers, exchange and tables, which outlive it.
#pragma once

#include <kj/async.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "common/base/aligned.h"
#include "common/engine/nn/data_parallel_model.h"
#include "worker/batch_decode.h"
#include "worker/parameter_exchange.h"
#include "worker/server_chunks.h"
#include "worker/session_context.h"
#include "worker/session_tables.h"
#include "worker/shard_reader.h"

namespace pstrain {

// The loss, correct answers and examples of the extra slices of a step.
struct StepTotals {
  double loss = 0;
  uint64_t correct = 0, examples = 0;
};

class SessionOrders {
 public:
  SessionOrders(const SessionFacts& facts, SessionWaits& waits, nn::DataParallelModel<float>& model,
                ServerChunks& servers, ParameterExchange& exchange, SessionTables* tables,
                std::vector<uint32_t> extra_slices);

  // Keeps a watch call open at the coordinator for its orders (takeover, pause for a cut).
  void watch();

  // Async: the coordinator asked for a pause at a cut.
  bool pause_due() const { return pause_cut_ != 0; }
  // Tells the coordinator where this worker stands (`epoch`, `step`, `steps_done` in the job),
  // with its compression state on the servers first, and waits until it may go on.
  void pause_for_cut(kj::WaitScope& wait_scope, uint32_t epoch, uint64_t step, uint64_t steps_done);

  // Sync: the slices of lost workers this worker computes every step besides its own.
  const std::vector<uint32_t>& extra_slices() const { return extra_slices_; }
  // reduce_on_plateau: the learning-rate multiplier of the epoch being trained, pushed with the
  // extra slices' and taken-over slices' gradients as with this worker's own.
  void set_lr_scale(float scale) { lr_scale_ = scale; }
  // Computes this step's extra slices on the step's values, from `readers` (one per extra slice),
  // and pushes each in its slice's name; adds their loss, correct answers and examples to
  // `totals`. Returns the pushes' replies.
  kj::Promise<void> compute_extras(kj::WaitScope& wait_scope, uint64_t global_step, uint32_t epoch, uint64_t step,
                                   std::vector<std::unique_ptr<ShardReader>>& readers, StepTotals& totals);

  // One step's exchange once its gradient is complete: pushes what is left, then waits for all
  // replies (and `extras`) and takes the new values. If the coordinator asks, first computes and
  // pushes a lost worker's slice of this step (a takeover).
  void finish_step(kj::WaitScope& wait_scope, const GradientSlice& mine, kj::Promise<void> extras);

 private:
  // Reads the lost worker's examples of the step from a data stream of its slice, computes its
  // gradient on the step's version and pushes it in its name; returns the replies.
  kj::Promise<void> take_over(kj::WaitScope& wait_scope);
  BatchShape batch_shape() const;
  // The sparse tables' rows that `examples` examples of extra_inputs_ read, at version `step`,
  // into the tables' `slot`, and the model pointed at them.
  void fetch_rows(kj::WaitScope& wait_scope, size_t slot, uint32_t examples, uint64_t step,
                  TableClient::At at = TableClient::At::kLeast);

  const SessionFacts& facts_;
  SessionWaits& waits_;
  nn::DataParallelModel<float>& model_;
  ServerChunks& servers_;
  ParameterExchange& exchange_;
  SessionTables* tables_;  // the sparse tables' rows (a slot per slice); null without any
  // A takeover order from the coordinator: a lost worker's slice of a sync step.
  struct Takeover {
    uint64_t step = 0;
    uint32_t slice = 0, slice_count = 1;
  };
  std::optional<Takeover> takeover_;
  kj::Maybe<kj::ForkedPromise<void>> order_arrived_;  // the open watch call (resolves with an order)
  uint64_t pause_cut_ = 0;                            // async: a cut to pause for, 0 if none
  AlignedFloats takeover_grads_;
  // Sync extra slices: their indices, gradients (one per slice); and one batch's inputs, targets
  // and examples' indices at a time (an extra slice's, or a takeover's).
  std::vector<uint32_t> extra_slices_;
  float lr_scale_ = 1.0f;
  std::vector<AlignedFloats> extra_grads_;
  AlignedFloats extra_inputs_;
  std::vector<float> extra_labels_;
  std::vector<uint32_t> extra_ids_;
};

}  // namespace pstrain
