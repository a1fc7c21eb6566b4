// The job's parameters on the servers, as one worker sees them: the chunk table (each chunk's
// server and key, and its place in the flat parameter buffer), the version of each chunk this
// worker last received, this worker's copy of the values, and the calls every exchange
// (parameter_exchange.h) makes: pulls, one chunk's push, a factored push's header. How a push is
// encoded and the state that keeps is PushCompression's (push_compression.h); the connections are
// ServerConnections' (server_connections.h).
//
// Values: values() holds the version the current step computes on; replies fill next_values(),
// and swap_values() makes those current once the step's last reply is in. Keeping the step's
// version intact until then is what lets this worker take over a lost worker's slice of the step.
//
// Thread rules: the event loop's thread only. Ownership: owns the connections, the value buffers
// and the compression. A push points into the caller's gradient (zero-copy), which must stay
// untouched until the push's reply is in (a reply implies its request was fully sent).
#pragma once

#include <kj/async-io.h>

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/base/aligned.h"
#include "common/engine/chunk_plan.h"
#include "common/engine/param_layout.h"
#include "common/rpc/proto/pstrain.capnp.h"
#include "common/rpc/rpc_util.h"
#include "worker/input_sparsity.h"
#include "worker/push_compression.h"
#include "worker/server_connections.h"

namespace pstrain {

// A gradient to push: this worker's slice of a step, or a lost worker's in a takeover.
struct GradientSlice {
  uint64_t step = 0;                    // sync: the job's step; async: the pushing worker's count
  uint32_t slice = 0, slice_count = 1;  // whose slice of the step (the push's `worker` too)
  uint32_t examples = 0;
  const float* gradient = nullptr;      // the flat gradient, in the parameter layout
  float lr_scale = 1.0f;                // sync, reduce_on_plateau: the step's epoch's (PushParams.lrScale)
};

// Counters for the log and the progress reports: payload bytes of gradients, factors and states
// sent (pushed) and of values and states received (pulled), as they travel (compressed or not),
// and the pushes a sync step with backup workers dropped (applied = false in the reply).
struct ExchangeCounts {
  uint64_t pushed_bytes = 0, pulled_bytes = 0, late_pushes = 0;
  void count_reply(bool applied) { late_pushes += applied ? 0 : 1; }
  uint64_t exchanged_bytes() const { return pushed_bytes + pulled_bytes; }
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

  // How pushes are encoded, and the state that keeps (set once, before the first pull).
  PushCompression& compression() { return compression_; }
  const PushCompression& compression() const { return compression_; }
  // Mixed precision: the chunks of these tensors (layout indices: Model::rounded_kernels, which
  // this worker's products read only rounded to bfloat16) take their whole replies in bfloat16
  // (PushParams.replyBfloat16), unless fp16 replies are on. Set once, before the first push.
  void reply_rounded(const std::vector<size_t>& params);
  // Whether chunk k's whole replies come in bfloat16.
  bool replies_rounded(size_t k) const { return !rounded_.empty() && rounded_[k]; }
  size_t rounded_chunks() const { return static_cast<size_t>(std::count(rounded_.begin(), rounded_.end(), true)); }

  // Connects to every server, one after the other, proving `credential` on each.
  void connect(kj::WaitScope& wait_scope, kj::AsyncIoProvider& io, const rpc::ClusterCredential& credential) {
    servers_.connect(wait_scope, io, credential);
  }
  // In-process (tests): servers of this process instead of connect().
  void use_servers(std::vector<proto::ParameterServer::Client> servers) { servers_.use(std::move(servers)); }

  // The dense tensors' chunks (values() holds them); the sparse tables' pieces apart.
  const std::vector<ChunkInfo>& chunks() const { return chunks_; }
  const std::vector<ChunkInfo>& table_pieces() const { return table_pieces_; }
  ServerConnections& connections() { return servers_; }
  const rpc::WorkerPass& pass() const { return pass_; }
  // Where each chunk lives in the flat buffers (values, gradients), by chunk index.
  const std::vector<size_t>& offsets() const { return offsets_; }
  size_t server_count() const { return servers_.size(); }

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
  // Clipping (sync): every chunk's values at `version` into next_values(), each pull bringing
  // its chunk's clip factor (factors[k] for chunk k), which applies the held step.
  kj::Promise<void> pull_clipped(uint64_t version, const std::vector<float>& factors);
  // Clipping: by chunk, the sum of squares the step's push replies carried (PushResults.held).
  const std::vector<double>& sum_squares() const { return sum_squares_; }
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

  ExchangeCounts& counts() { return counts_; }
  const ExchangeCounts& counts() const { return counts_; }

 private:
  // Every chunk's values at a version >= min_version (exactly min_version when `exact`) into
  // `into`; their versions into `versions`.
  void pull_into(kj::WaitScope& wait_scope, uint64_t min_version, bool exact, AlignedFloats& into,
                 std::vector<uint64_t>& versions, std::optional<StateWanted> state = std::nullopt);
  // pull_into's requests, and pull_clipped's when `clip_factors` is given.
  kj::Promise<void> send_pulls(uint64_t min_version, bool exact, AlignedFloats& into, std::vector<uint64_t>& versions,
                               std::optional<StateWanted> state, const std::vector<float>* clip_factors);
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
  std::vector<ChunkInfo> table_pieces_;
  std::vector<ChunkInfo> chunks_;
  std::vector<size_t> offsets_;
  std::vector<uint64_t> versions_;  // per chunk
  std::vector<double> sum_squares_;  // per chunk (clipping)
  std::vector<bool> rounded_;        // per chunk (reply_rounded); empty: none
  ServerConnections servers_;
  AlignedFloats values_, next_values_;
  AlignedFloats exact_values_;  // pull_exact's
  PushCompression compression_;
  ExchangeCounts counts_;
};

}  // namespace pstrain
