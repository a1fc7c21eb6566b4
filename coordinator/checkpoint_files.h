// The conversions between a job's shards and model files, on a thread of their own (each can take
// seconds for a big model, and the event loop must not wait):
// - a complete backup (every server's replica, as encoded chunk snapshots) becomes a checkpoint:
//   one safetensors file with the parameters and the optimizer's slots (safetensors.h);
// - a model or checkpoint file becomes the shards a new job's servers start from (`init_from`):
//   the file read against the new job's layout, cut by its chunk plan, each chunk an encoded
//   snapshot at the starting version, grouped by server in key order (what adoptBackup takes).
//
// Thread rules: thread-safe; call from a thread with a KJ event loop, on which the promises
// resolve. Owns its TaskThread (stopped, after the work already posted, by the destructor).
#pragma once

#include <kj/async.h>

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "common/chunk_plan.h"
#include "common/job_spec.h"
#include "common/param_layout.h"
#include "common/safetensors.h"
#include "common/task_thread.h"

namespace pstrain {

// The servers' starting shards of a job that starts from a file.
struct StartingShards {
  uint64_t version = 0;  // the step the job starts at (0 unless it resumes)
  int64_t epoch = 0;     // epochs completed at that step (the file's)
  std::vector<std::vector<std::string>> servers;  // by server index: encoded snapshots in key order
};

class CheckpointFiles {
 public:
  // The checkpoint file (pieces of at most max_piece_bytes) of a backup: `blobs` are every
  // server's replica chunks (any order), cut from `layout` by `chunks`. Fails if a blob does not
  // decode or the chunks do not cover the layout.
  kj::Promise<std::vector<std::string>> assemble(ParamLayout layout, std::vector<ChunkInfo> chunks,
                                                 std::vector<std::string> blobs, Metadata metadata,
                                                 size_t max_piece_bytes);

  // The starting shards of a job of `spec` (its layout, its chunk plan `chunks` over `servers`)
  // from the file `read_file` returns (called on the thread; nullopt: "the file is gone"). With
  // spec.init_from.optimizer_state, the file's slots and update count and its step (the version);
  // else a fresh optimizer state and version 0. Fails with the reason (a ModelFileError's message
  // naming the tensor, a file without optimizer state, a step past the job's end).
  kj::Promise<StartingShards> starting_shards(std::function<std::optional<std::string>()> read_file, JobSpec spec,
                                              std::vector<ChunkInfo> chunks, uint32_t servers,
                                              uint64_t steps_per_epoch);

 private:
  TaskThread thread_;
};

}  // namespace pstrain
