// One step's gradient pushes of chunks, whole or row-sparse as a StepRows plans them, and their
// replies, whose values go to ServerChunks::next_values(). The part every exchange has: the dense
// and sparse ones push all chunks this way, the factored one the chunks it does not push as
// factors.
//
// When a chunk leaves (DESIGN-NOTES "Batched pushes"): a chunk of at least rpc::kBatchedPushBytes
// goes in a push of its own as soon as backward finishes its gradient (backward_order.h). Smaller
// ones are queued per server, and a server's queue goes in one message (one pushBatch, or a push
// when it holds one chunk) when it reaches that many bytes, when the step's gradient is complete,
// or when backward has finished some gradients and, in the previous step, still had at least
// kOverlapSeconds of compute left from that point: then sending now overlaps the exchange with
// that compute, while near the end of backward (all of it, for a small model) one message per
// server saves more than the overlap would. What leaves when changes messages, never results.
//
// Thread rules and ownership: those of parameter_exchange.h; refers to the ServerChunks and the
// StepRows given, which outlive it.
#pragma once

#include <kj/async.h>

#include <chrono>
#include <cstddef>
#include <vector>

#include "worker/backward_order.h"
#include "worker/server_chunks.h"
#include "worker/step_rows.h"

namespace pstrain {

class ChunkPushes {
 public:
  // Backward compute left after a push_from call (measured on the previous step) for which the
  // queued pushes go at once rather than wait: about twenty times a message's fixed cost.
  static constexpr double kOverlapSeconds = 0.001;

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
  // Sends `server`'s queue (if any) in one message; returns how many it sent (0 or 1).
  size_t send_queue(uint32_t server, const GradientSlice& slice);

  ServerChunks& servers_;
  const StepRows* rows_;
  BackwardOrder order_;
  kj::Vector<kj::Promise<void>> replies_;  // of the current step
  // Per server: the small chunks' pushes waiting to go, and their gradients' bytes.
  std::vector<std::vector<ServerChunks::BatchedPush>> queued_;
  std::vector<size_t> queued_bytes_;
  // This step's push_from calls, when they came; per call of the previous step, the seconds from
  // it to the end of the step's gradient.
  std::vector<std::chrono::steady_clock::time_point> calls_;
  std::vector<double> compute_left_;
};

}  // namespace pstrain
