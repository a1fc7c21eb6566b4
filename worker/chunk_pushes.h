// One step's gradient pushes of chunks, whole or row-sparse as a StepRows plans them, and their
// replies, whose values go to ServerChunks::next_values(). The part every exchange has: the dense
// and sparse ones push all chunks this way, the factored one the chunks it does not push as
// factors.
//
// When a chunk leaves: a chunk of at least rpc::kBatchedPushBytes goes in a push of its own as
// soon as backward finishes its gradient (backward_order.h). Smaller ones wait, per server, until
// that many bytes of them are pending or the step's gradient is complete, and go together in one
// pushBatch: a small model's step is then one or two messages per server instead of one per
// chunk, and a large model's big chunks still leave while earlier layers compute (DESIGN-NOTES
// "Batched pushes").
//
// Thread rules and ownership: those of parameter_exchange.h; refers to the ServerChunks and the
// StepRows given, which outlive it.
#pragma once

#include <kj/async.h>

#include <cstddef>
#include <vector>

#include "worker/backward_order.h"
#include "worker/server_chunks.h"
#include "worker/step_rows.h"

namespace pstrain {

class ChunkPushes {
 public:
  // Pushes `chunks` (indices into the table); row-sparse as `rows` plans, or whole when null.
  ChunkPushes(ServerChunks& servers, std::vector<size_t> chunks, const StepRows* rows);
  // Pushes every chunk of the table.
  ChunkPushes(ServerChunks& servers, const StepRows* rows);

  // Pushes (or queues, when small) the chunks not pushed yet this step whose gradient starts at
  // flat offset `from` or later; returns how many messages it sent.
  size_t push_from(size_t from, const GradientSlice& slice);
  // Pushes the rest and hands over the replies of the step's pushes; the next push is the next
  // step's.
  kj::Vector<kj::Promise<void>> end_step(const GradientSlice& slice);

 private:
  // Sends the queued pushes of every server with at least `min_bytes` of them queued: one push,
  // or one pushBatch; returns how many messages it sent.
  size_t flush(size_t min_bytes, const GradientSlice& slice);

  ServerChunks& servers_;
  const StepRows* rows_;
  BackwardOrder order_;
  kj::Vector<kj::Promise<void>> replies_;  // of the current step
  // Per server: the small chunks' pushes waiting to go, and their gradients' bytes.
  std::vector<std::vector<ServerChunks::BatchedPush>> queued_;
  std::vector<size_t> queued_bytes_;
};

}  // namespace pstrain
