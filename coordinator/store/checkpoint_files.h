// The conversions between a job's shards and model files, on a thread of their own (each can take
// seconds for a big model, and the event loop must not wait):
// - a complete backup (every server's replica, as encoded chunk snapshots) becomes a checkpoint:
//   one safetensors file with the parameters and the optimizer's slots (safetensors.h), written
//   piece by piece as the replicas' chunks are read one at a time (stream_checkpoint), so neither
//   the replicas nor the file are ever whole in memory: one chunk and one piece at a time;
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

#include "common/engine/chunk_plan.h"
#include "common/data/job_spec.h"
#include "common/engine/param_layout.h"
#include "common/engine/safetensors.h"
#include "common/base/task_thread.h"

namespace pstrain {

// The servers' starting shards of a job that starts from a file.
struct StartingShards {
  uint64_t version = 0;  // the step the job starts at (0 unless it resumes)
  int64_t epoch = 0;     // epochs completed at that step (the file's)
  std::vector<std::vector<std::string>> servers;  // by server index: encoded snapshots in key order
};

// Where a checkpoint's chunks come from and its file goes, one at a time (both called on the
// thread that streams it).
struct CheckpointIo {
  // The encoded snapshot of chunk `c`, the `index`-th of server c.server's replica (in key
  // order); nullopt if it is missing.
  std::function<std::optional<std::string>(const ChunkInfo& c, size_t index)> read_chunk;
  // Piece `index` of the file; returns once the piece may be dropped (written). Piece 0 is the
  // header alone, written last (it names the update count, known once every chunk is read);
  // pieces 1.. the data, in order, each of max_piece_bytes but the last.
  std::function<void(size_t index, std::string piece)> write_piece;
};

struct StreamedFile {
  size_t pieces = 0;  // written: 0 .. pieces - 1
  int64_t bytes = 0;  // of the whole file
};

// Writes the checkpoint file of a backup cut from `layout` by `chunks` through `io`: the file
// encode_safetensors_pieces would make of the parameters and optimizer state the chunks add up
// to (byte for byte once the pieces are joined), holding one decoded chunk and one piece at a
// time. Every chunk is read once per tensor it feeds (1 + the optimizer's slots times). Throws
// Error if a chunk is missing or does not decode, has the wrong key or size, or the chunks'
// optimizer slots differ.
StreamedFile stream_checkpoint(const ParamLayout& layout, const std::vector<ChunkInfo>& chunks, const CheckpointIo& io,
                               const Metadata& metadata, size_t max_piece_bytes);

class CheckpointFiles {
 public:
  // stream_checkpoint on the thread.
  kj::Promise<StreamedFile> assemble(ParamLayout layout, std::vector<ChunkInfo> chunks, CheckpointIo io,
                                     Metadata metadata, size_t max_piece_bytes);

  // The starting shards of a job of `spec` (its layout, its chunk plan `chunks` over `servers`)
  // from the file `read_file` returns (called on the thread; nullopt: "the file is gone"). With
  // spec.init_from.optimizer_state, the file's slots and update count and its step (the version);
  // else a fresh optimizer state and version 0. Fails with the reason (a ModelFileError's message
  // naming the tensor, a file without optimizer state, a step past the job's end).
  kj::Promise<StartingShards> starting_shards(std::function<std::optional<std::string>()> read_file, JobSpec spec,
                                              std::vector<ChunkInfo> chunks, uint32_t servers,
                                              uint64_t steps_per_epoch);
  // A model file (parameters only, with `metadata`) made from the checkpoint file `read_file`
  // returns (called on the thread; nullopt: "the file is gone"): the model of a job that stopped
  // early. Fails if the file is gone or does not fit `layout`.
  kj::Promise<std::string> model_from_checkpoint(std::function<std::optional<std::string>()> read_file,
                                                 ParamLayout layout, Metadata metadata);

 private:
  TaskThread thread_;
};

}  // namespace pstrain
