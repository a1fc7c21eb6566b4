// Factored exchange (docs/DESIGN-NOTES.md, "Factored exchange"): which dense kernels a worker
// pushes as factors instead of gradients, grouped into one ParameterServer.pushFactors call per
// kernel and server (several where that server's part of the kernel is over rpc::kMaxPartBytes:
// the reply carries its values), and the gathering of one call's input rows.
//
// A dense kernel's gradient over a batch is deltas * inputs^T: out x batch times batch x in, of
// rank at most the batch. For a kernel of in x out floats the factors are batch x (in + out), and
// the deltas go to every server that holds part of the kernel, so a kernel is factored when
// batch * (in + servers * out) is at most a third of in * out (the MNIST MLP with batch 64 on two
// servers: both large kernels, 140k and 109k floats instead of 549k and 350k). The server
// multiplies the factors out: the product moves from the worker to the server with no extra work,
// but onto the path between a worker's push and its reply, which is why the factors must be much
// smaller to pay (at half, one worker with 128 examples on one server was 5-10% slower: measured).
//
// Thread rules: immutable after construction, except the scratch passed to gather_inputs.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <vector>

#include "common/base/aligned.h"
#include "common/engine/chunk_plan.h"
#include "common/engine/param_layout.h"

namespace pstrain {

class FactorPlan {
 public:
  // Chunks of one factored kernel on one server (at most rpc::kMaxPartBytes of values): one
  // pushFactors call per step.
  struct Group {
    size_t param = 0;          // the kernel's index in the layout
    size_t param_offset = 0;   // its offset in the flat buffer (backward finishes it there)
    uint32_t server = 0;
    size_t rows = 0, columns = 0;  // the kernel's shape [in, out]
    std::vector<size_t> chunks;    // indices into the chunk table, by position in the kernel
  };

  // No groups when `enabled` is false. `batch`: the most examples a push carries. `per_example`:
  // whether a 2-D kernel's gradient is a product over the batch's examples (a dense layer on flat
  // inputs: Model::is_dense_kernel), the only kind that factors; null: every 2-D kernel is.
  FactorPlan(const ParamLayout& layout, const std::vector<ChunkInfo>& chunks, int64_t batch, bool enabled,
             const std::function<bool(size_t)>& per_example = nullptr);

  const std::vector<Group>& groups() const { return groups_; }
  // Indexed by layout parameter: true for the kernels pushed as factors (for Model::compute_gradients).
  const std::vector<bool>& factored_kernels() const { return factored_; }
  // True when chunk k (index into the table) goes in a group rather than in its own push.
  bool is_factored_chunk(size_t k) const { return factored_chunk_[k]; }

  // The group's input rows that are nonzero in some example (ascending), and their values,
  // examples x rows.size(), example after example (then a zero float when that count is odd).
  // `inputs` is the layer's input, column-major (group.rows x examples).
  void gather_inputs(const Group& group, const float* inputs, size_t examples, std::vector<uint32_t>& rows,
                     AlignedFloats& values) const;

 private:
  std::vector<ChunkInfo> chunks_;
  std::vector<Group> groups_;
  std::vector<bool> factored_;
  std::vector<bool> factored_chunk_;
};

}  // namespace pstrain
