// The row-sparse exchange's plan of one step (input_sparsity.h; docs/DESIGN-NOTES.md, "Sparse
// exchange"): per chunk, the rows its push carries (those the step's batch touches) and the rows
// its reply brings back (those the next step's batch touches; all of them when that batch is not
// here yet, or an evaluation comes next, which reads every row). Everything is whole while the
// model allows no row-sparse exchange.
//
// With it, ServerChunks::values() is only guaranteed to be current in the rows the step's batch
// touches: anything else that computes (a takeover) must fetch dense values first.
//
// Thread rules: its owner's thread. The ranges stay valid until the next plan().
#pragma once

#include <kj/common.h>

#include <cstdint>
#include <string>
#include <vector>

#include "common/rpc/proto/pstrain.capnp.h"
#include "worker/input_sparsity.h"

namespace pstrain {

class StepRows {
 public:
  // `chunks`: how many chunks the table has.
  StepRows(InputSparsity sparsity, size_t chunks);

  bool active() const { return sparsity_.active(); }
  // For the session's first log line: ", row-sparse exchange of the first layer" when active.
  std::string describe() const;

  // The step's batch and, when known, the next one (see above). Does nothing when not active.
  void plan(proto::Batch::Reader batch, kj::Maybe<proto::Batch::Reader> next);
  // Chunk k's rows in the push and in its reply (nullopt: whole).
  const InputSparsity::Ranges& push(size_t k) const { return push_[k]; }
  const InputSparsity::Ranges& reply(size_t k) const { return reply_[k]; }

 private:
  std::vector<InputSparsity::Ranges> marked(proto::Batch::Reader batch);

  InputSparsity sparsity_;
  std::vector<uint8_t> feature_mask_;
  std::vector<InputSparsity::Ranges> push_, reply_;  // per chunk, for the current step
};

}  // namespace pstrain
