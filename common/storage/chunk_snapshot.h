// One chunk of a job's parameters as a backup holds it: values, optimizer slots and update count,
// the workers' compression states of that version (training.compression topk/powersgd: each
// worker's residual and warm-start factors for the chunk), and its binary encoding (a server's
// backup blob, a replica's part, a checkpoint's source).
//
// Thread rules: plain values and pure functions.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "common/base/aligned.h"
#include "common/engine/optim/optimizer.h"

namespace pstrain {

struct ChunkSnapshot {
  uint32_t key = 0;
  uint64_t version = 0;
  AlignedFloats values;
  optim::OptimizerState optimizer_state;
  // By slice (worker index): that worker's state pushed with the step that made `version`
  // (PushParams.workerState), opaque float32 here. Empty for uncompressed jobs, whose blobs then
  // encode as before this field existed.
  std::map<uint32_t, std::vector<float>> worker_state;
};

std::string encode_snapshot(const ChunkSnapshot& chunk);
// nullopt if the blob is not an encoded snapshot (truncated, trailing bytes, absurd sizes).
std::optional<ChunkSnapshot> decode_snapshot(const std::string& blob);

}  // namespace pstrain
