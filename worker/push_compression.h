// One worker's compression of its pushes (training.compression): how a chunk's gradient is
// encoded (fp16, bf16, topk or powersgd with this worker's error feedback, or float32), and the state
// that encoding keeps on the worker (the topk/powersgd residual and powersgd's warm-start factors)
// with its way to and from the servers' backups, so a recovered run goes on exactly as the
// uninterrupted one. The chunk table and the connections are ServerChunks' (server_chunks.h).
//
// Thread rules: the event loop's thread only (one session's). Ownership: owns the residual, the
// warm-start factors and the encoders' scratch; holds nothing of the caller's after a call.
#pragma once

#include <capnp/blob.h>
#include <kj/common.h>

#include <cstdint>
#include <functional>
#include <optional>
#include <set>
#include <vector>

#include "common/base/aligned.h"
#include "common/data/training_spec.h"
#include "common/engine/chunk_plan.h"
#include "common/engine/param_layout.h"
#include "common/rpc/proto/pstrain.capnp.h"
#include "worker/compression_chunks.h"

namespace pstrain {

// The compression state a session's first pull takes back after a restore: `slice`'s (this
// worker's). Sync: the one the servers hold for the version the session starts from. Async
// (`position` set): the one put at that position (the worker's steps done) at a cut.
struct StateWanted {
  uint32_t slice = 0;
  std::optional<uint64_t> position;
};

class PushCompression {
 public:
  // `offsets[k]`: chunk k's place in the flat parameter buffer of `layout`. No compression until
  // configure().
  PushCompression(const std::vector<ChunkInfo>& chunks, const std::vector<size_t>& offsets, const ParamLayout& layout);

  // The job's training.compression, before the first pull (the session sets it once): powersgd's
  // first Q of each chunk comes from `seed` (the model's) and the chunk's place, so every run of a
  // job starts from the same factors. Row-sparse pushes and replies stay float32 (the caller's).
  void configure(const CompressionSpec& compression, uint64_t seed = 0);
  const CompressionSpec& spec() const { return spec_; }
  // Whether the compression keeps state on this worker (topk, powersgd).
  bool keeps_state() const { return spec_.keeps_worker_state(); }

  // Sync jobs with topk or powersgd: `is_backup_point(v)` says whether the servers back up
  // version v (the spec's backup frequency); a cut's backup points come in the push replies
  // (note_cut), before the step that needs them. The push of a step whose next version is one
  // carries this worker's state for the chunk, which the servers keep in that backup.
  void set_backup_points(std::function<bool(uint64_t version)> is_backup_point) {
    is_backup_point_ = std::move(is_backup_point);
  }
  // A push reply announced a cut whose backup is at `version`.
  void note_cut(uint64_t version) { cut_points_.insert(version); }

  // Chunk k's gradient (`gradient` points at the chunk's first value) into `request`'s gradient:
  // fp16 or bf16, or (`own_slice`: this worker's slice, not a lost worker's in a takeover, whose residual
  // died with it) topk/powersgd of gradient + residual with this worker's state attached when the
  // push of `step` is due to carry it, else float32 by reference (zero-copy: `gradient` must stay
  // untouched until the push's reply is in). Returns the payload bytes.
  size_t encode(size_t k, const float* gradient, bool own_slice, uint64_t step,
                proto::ParameterServer::PushParams::Builder request);
  // Whether replies of whole chunks come in half precision.
  bool replies_half() const { return spec_.kind == CompressionKind::kFp16; }
  // fp16: values pulled whole rounded to half precision, as a reply would bring them, so a step
  // computes on the same values whether they came by reply or by pull.
  void round_pulled(AlignedFloats& values) const;

  // Chunk k's state (residual, then warm-start Q when it has one), then `position` (async: its
  // 8 bytes, as two float32 slots) when given, into `bytes` (state_bytes() long).
  size_t state_bytes(size_t k, bool with_position) const;
  void write_state(size_t k, kj::ArrayPtr<kj::byte> bytes, std::optional<uint64_t> position = std::nullopt) const;
  // Chunk k's state from a pull's reply, if it is the one `wanted` (async: put at its position):
  // whether it was taken. Throws if its size does not fit the chunk.
  bool load_state(size_t k, capnp::Data::Reader state, const StateWanted& wanted);
  // Chunks whose state load_state() took (for the log).
  uint64_t states_taken() const { return states_taken_; }

 private:
  // Whether the push of `step` carries this worker's state: its next version is a backup point.
  bool state_due(uint64_t step) const {
    return is_backup_point_ && (is_backup_point_(step + 1) || cut_points_.count(step + 1) != 0);
  }
  size_t attach_state(size_t k, proto::ParameterServer::PushParams::Builder request) const;
  size_t encode_topk(size_t k, const float* gradient, proto::ParameterServer::PushParams::Builder request);
  size_t encode_powersgd(size_t k, const float* gradient, proto::ParameterServer::PushParams::Builder request);

  std::vector<CompressionChunk> chunks_;
  size_t total_size_ = 0;
  CompressionSpec spec_;
  AlignedFloats residual_;  // topk, powersgd: what was not sent yet, per value
  std::vector<uint32_t> topk_indices_;
  std::vector<float> topk_values_, topk_scratch_, factor_p_, factor_q_, factor_scratch_;
  std::function<bool(uint64_t)> is_backup_point_;
  std::set<uint64_t> cut_points_;  // cuts' backup points the replies announced (few: one a cut)
  uint64_t states_taken_ = 0;
};

}  // namespace pstrain
