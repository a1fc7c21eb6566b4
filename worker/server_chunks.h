// The job's parameters on the servers, as one worker sees them: the connections, the chunk table
// (each chunk's server and key, and its place in the flat parameter buffer), the version of each
// chunk this worker last received, this worker's copy of the values, and the calls every
// exchange (parameter_exchange.h) makes: pulls, one chunk's push, a factored push's header.
//
// Values: values() holds the version the current step computes on; replies fill next_values(),
// and swap_values() makes those current once the step's last reply is in. Keeping the step's
// version intact until then is what lets this worker take over a lost worker's slice of the step.
//
// Thread rules: the event loop's thread only. Ownership: owns the connections, the value
// buffers, the topk/powersgd residual and powersgd's warm-start factors. A push points into the
// caller's gradient (zero-copy), which must stay untouched until the push's reply is in (a reply
// implies its request was fully sent).
#pragma once

#include <kj/async-io.h>

#include <cstdint>
#include <functional>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "common/base/aligned.h"
#include "common/engine/chunk_plan.h"
#include "common/data/job_spec.h"
#include "common/engine/param_layout.h"
#include "common/rpc/proto/pstrain.capnp.h"
#include "common/rpc/rpc_util.h"
#include "worker/input_sparsity.h"

namespace pstrain {

// The compression state a session's first pull takes back after a restore: `slice`'s (this
// worker's). Sync: the one the servers hold for the version the session starts from. Async
// (`position` set): the one put at that position (the worker's steps done) at a cut.
struct StateWanted {
  uint32_t slice = 0;
  std::optional<uint64_t> position;
};

// A gradient to push: this worker's slice of a step, or a lost worker's in a takeover.
struct GradientSlice {
  uint64_t step = 0;                    // sync: the job's step; async: the pushing worker's count
  uint32_t slice = 0, slice_count = 1;  // whose slice of the step (the push's `worker` too)
  uint32_t examples = 0;
  const float* gradient = nullptr;      // the flat gradient, in the parameter layout
};

class ServerChunks {
 public:
  using PushFactorsRequest =
      capnp::Request<proto::ParameterServer::PushFactorsParams, proto::ParameterServer::PushFactorsResults>;

  // Throws (KJ_REQUIRE) if a chunk does not fit `layout` or names no server of `server_addresses`.
  // Waits end when `stop` resolves (stoppable_wait.h); it must outlive this.
  // `pass` goes with every call (the worker's node id and token of the job).
  ServerChunks(std::string job_id, uint64_t generation, rpc::WorkerPass pass, std::vector<ChunkInfo> chunks,
               std::vector<std::string> server_addresses, const ParamLayout& layout, kj::ForkedPromise<void>& stop);

  // The job's training.compression, before the first pull (the session sets it once): whole-chunk
  // pushes are encoded with it (fp16, or topk/powersgd with this worker's residual) and fp16
  // replies decoded; powersgd's first Q of each chunk comes from `seed` (the model's) and the
  // chunk's place, so every run of a job starts from the same factors; fp16 values pulled whole
  // are rounded to half precision as a reply would bring them, so a step computes on the same
  // values whether they came by reply or by pull (a recovered run ends as an uninterrupted one).
  // Row-sparse pushes and replies stay float32.
  void set_compression(const CompressionSpec& compression, uint64_t seed = 0);

  // Sync jobs with topk or powersgd: `is_backup_point(v)` says whether the servers back up
  // version v (the spec's backup frequency); a cut's backup points come in the push replies
  // (PushResults.cutAt), before the step that needs them. The push of a step whose next version
  // is one carries this worker's compression state for the chunk (its residual, then powersgd's
  // warm-start Q), which the servers keep in that backup; pull() with `state` takes it back
  // after a restore, so a recovered run goes on exactly as the uninterrupted one.
  void set_backup_points(std::function<bool(uint64_t version)> is_backup_point) {
    is_backup_point_ = std::move(is_backup_point);
  }
  // Whether the compression keeps state on this worker (topk, powersgd).
  bool has_compression_state() const { return compression_.keeps_worker_state(); }

  // Connects to every server, one after the other, proving `credential` on each.
  void connect(kj::WaitScope& wait_scope, kj::AsyncIoProvider& io, const rpc::ClusterCredential& credential);

  const std::vector<ChunkInfo>& chunks() const { return chunks_; }
  // Where each chunk lives in the flat buffers (values, gradients), by chunk index.
  const std::vector<size_t>& offsets() const { return offsets_; }
  size_t server_count() const { return addresses_.size(); }

  const float* values() const { return values_.data(); }
  // Chunk k's place in the buffer the step's replies fill.
  float* next_values(size_t k) { return next_values_.data() + offsets_[k]; }
  // The step's last reply is in: its values become current.
  void swap_values() { std::swap(values_, next_values_); }
  // A reply brought chunk k's values at `version`.
  void set_version(size_t k, uint64_t version) { versions_[k] = version; }

  // Every chunk's values at a version >= min_version into values() (a session's first step).
  // With `state` (with compression state): also this worker's compression state, where the
  // servers hold the one wanted (a restored backup's); chunks without one start from a zero
  // residual and the initial Q.
  void pull(kj::WaitScope& wait_scope, uint64_t min_version, std::optional<StateWanted> state = std::nullopt);
  // Async, pausing for a cut (no push of this worker in flight): puts this worker's compression
  // state of every chunk on its server (putState), tagged with `position` (its steps done), for
  // the cut's backup.
  void put_state(kj::WaitScope& wait_scope, uint32_t worker, uint64_t position);
  // Every chunk's values at exactly `version`, into a buffer of this class (valid until the next
  // call): what a takeover computes on when values() is current only in some rows.
  const float* pull_exact(kj::WaitScope& wait_scope, uint64_t version);

  // Chunk k's push of `slice`: only the rows of `ranges` when set (the others are exactly zero),
  // else whole. Its reply's values go to next_values(): only the rows of `want` when set.
  kj::Promise<void> push(size_t k, const GradientSlice& slice, const InputSparsity::Ranges& ranges,
                         const InputSparsity::Ranges& want);
  // Chunks' pushes of `slice` in one message to `server` (pushBatch), as push() would send each:
  // every chunk must be on that server. At most rpc::kMaxBatchedPushes.
  struct BatchedPush {
    size_t chunk = 0;
    InputSparsity::Ranges ranges, want;
  };
  kj::Promise<void> push_batch(uint32_t server, const std::vector<BatchedPush>& pushes, const GradientSlice& slice);
  // Every chunk's push of `slice`, whole, asking for no values (a takeover, in a lost worker's
  // name): the promise of their replies.
  kj::Promise<void> push_without_values(const GradientSlice& slice);
  // A pushFactors request to `server` for `chunks` (indices) with the header of `slice` filled in
  // (job, keys, base versions, step, slice, generation); the caller adds the factors.
  PushFactorsRequest factors_request(uint32_t server, const std::vector<size_t>& chunks, const GradientSlice& slice);

  // Async: tells every server this worker has finished the job.
  void finish(kj::WaitScope& wait_scope, uint32_t worker);

  // Counters for the log and the progress reports: payload bytes of gradients and factors sent
  // (pushed) and of values received (pulled), as they travel (compressed or not), and the
  // pushes a sync step with backup workers dropped (applied = false in the reply).
  void count_pushed(size_t bytes) { pushed_bytes_ += bytes; }
  void count_pulled(size_t bytes) { pulled_bytes_ += bytes; }
  void count_reply(bool applied) { late_pushes_ += applied ? 0 : 1; }
  uint64_t pushed_bytes() const { return pushed_bytes_; }
  uint64_t pulled_bytes() const { return pulled_bytes_; }
  uint64_t exchanged_bytes() const { return pushed_bytes_ + pulled_bytes_; }
  uint64_t late_pushes() const { return late_pushes_; }
  // Chunks whose compression state pull() took back (for the log).
  uint64_t states_taken() const { return states_taken_; }

 private:
  // Every chunk's values at a version >= min_version (exactly min_version when `exact`) into
  // `into`; their versions into `versions`.
  void pull_into(kj::WaitScope& wait_scope, uint64_t min_version, bool exact, AlignedFloats& into,
                 std::vector<uint64_t>& versions, std::optional<StateWanted> state = std::nullopt);
  // Whether the push of `step` carries this worker's compression state: its next version is a
  // backup point (the spec's, or a cut's the replies announced).
  bool state_due(uint64_t step) const {
    return is_backup_point_ && (is_backup_point_(step + 1) || cut_points_.count(step + 1) != 0);
  }
  // Chunk k's compression state (residual, then warm-start Q when it has one), then `position`
  // (async: its 8 bytes, as two float32 slots) when given, into `bytes` (state_bytes() long).
  void write_state(size_t k, kj::ArrayPtr<kj::byte> bytes, std::optional<uint64_t> position = std::nullopt) const;
  size_t state_bytes(size_t k, bool with_position) const;
  // Chunk k's compression state into a push (`request.workerState`).
  template <typename Request>
  void attach_state(size_t k, Request& request);
  // Chunk k's compression state from a pull's reply, if it is the one `wanted` (async: put at
  // its position); throws if its size does not fit the chunk.
  void load_state(size_t k, capnp::Data::Reader state, const StateWanted& wanted);
  kj::Promise<void> send_push(size_t k, const GradientSlice& slice, const InputSparsity::Ranges& ranges,
                              bool take_values, const InputSparsity::Ranges& want);
  // Chunk k's push of `slice` into `request` (encoded with the compression, with this worker's
  // state when due); `take_values`: the reply brings values (only `want`'s rows when set).
  void fill_push(size_t k, proto::ParameterServer::PushParams::Builder request, const GradientSlice& slice,
                 const InputSparsity::Ranges& ranges, bool take_values, const InputSparsity::Ranges& want);
  // Chunk k's reply: its values (`wanted`'s rows, or whole) into next_values(), its version, the
  // cut it announces. Throws if it carries other values than asked for.
  void take_reply(size_t k, proto::ParameterServer::PushResults::Reader reply, const InputSparsity::Ranges& wanted);

  std::string job_id_;
  rpc::WorkerPass pass_;
  uint64_t generation_;
  std::vector<ChunkInfo> chunks_;
  std::vector<size_t> offsets_;
  std::vector<uint64_t> versions_;  // per chunk
  // Per chunk: the row length of the matrix it is whole rows of (a kernel's last dimension), or 0
  // (a bias, or a chunk that cuts rows): powersgd's shape.
  std::vector<size_t> columns_;
  std::vector<bool> moving_;     // by chunk: a batch_norm moving statistic, always pushed exact
  std::vector<std::string> addresses_;
  kj::ForkedPromise<void>& stop_;
  std::vector<kj::Own<rpc::Connection>> connections_;
  std::vector<proto::ParameterServer::Client> servers_;
  AlignedFloats values_, next_values_;
  AlignedFloats exact_values_;  // pull_exact's
  CompressionSpec compression_;
  AlignedFloats residual_;                 // topk, powersgd: what was not sent yet, per value
  std::vector<uint32_t> topk_indices_;
  std::vector<float> topk_values_, topk_scratch_;
  // powersgd: per chunk, its rank (0: sent dense) and warm-start Q (rank x columns); the factors
  // of the push being built.
  std::vector<size_t> ranks_;
  std::vector<std::vector<float>> warm_q_;
  std::vector<float> factor_p_, factor_q_;
  std::vector<float> factor_scratch_;
  std::function<bool(uint64_t)> is_backup_point_;  // sync with compression state: see set_backup_points
  std::set<uint64_t> cut_points_;                  // cuts' backup points the replies announced (few: one a cut)
  uint64_t pushed_bytes_ = 0, pulled_bytes_ = 0, late_pushes_ = 0, states_taken_ = 0;
};

}  // namespace pstrain
