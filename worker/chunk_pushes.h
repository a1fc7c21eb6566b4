// One step's gradient pushes of chunks, each sent as soon as backward finishes its gradient
// (backward_order.h), whole or row-sparse as a StepRows plans them, and their replies, whose
// values go to ServerChunks::next_values(). The part every exchange has: the dense and sparse
// ones push all chunks this way, the factored one the chunks it does not push as factors.
//
// Thread rules and ownership: those of parameter_exchange.h; refers to the ServerChunks and the
// StepRows given, which outlive it.
#pragma once

#include <kj/async.h>

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

  // Pushes the chunks not pushed yet this step whose gradient starts at flat offset `from` or
  // later (0: all of them); returns how many.
  size_t push_from(size_t from, const GradientSlice& slice);
  // Pushes the rest and hands over the replies of the step's pushes; the next push is the next
  // step's.
  kj::Vector<kj::Promise<void>> end_step(const GradientSlice& slice);

 private:
  ServerChunks& servers_;
  const StepRows* rows_;
  BackwardOrder order_;
  kj::Vector<kj::Promise<void>> replies_;  // of the current step
};

}  // namespace pstrain
