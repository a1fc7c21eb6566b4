// A training session's sparse embedding tables (docs/DESIGN-NOTES.md "Sparse models"): for each
// slice the session computes in a step (its own, a takeover of a lost worker's, each extra
// slice), the batch's rows of every table pulled from the servers' pieces, handed to the model,
// and the slice's compact gradient pushed to every piece in the slice's name.
//
// A step on one slice: fetch() (collects the batch's ids, pulls their rows at the step's version,
// unless the last push's replies brought them), use() (points the model at them), the model's
// compute, push() (with the next batch when it is in: its rows come back in the replies, as the
// dense exchange's values do). Each slice has its own slot
// (ids, rows, gradients, the pushes' buffers): a sync step's pushes on a piece are answered only
// once every slice of the step is in, so a slice's buffers cannot be shared with another's.
//
// Thread rules: the session's thread only. Ownership: owns the slots; refers to the model and the
// connections (ServerChunks'), which outlive it.
#pragma once

#include <kj/async.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "common/engine/nn/data_parallel_model.h"
#include "common/engine/nn/sparse_rows.h"
#include "worker/batch_decode.h"
#include "worker/server_chunks.h"
#include "worker/table_client.h"

namespace pstrain {

class SessionTables {
 public:
  // Which slot: the session's own slice, a takeover, or extra slice i (kExtra + i).
  static constexpr size_t kOwn = 0, kTakeover = 1, kExtra = 2;

  // `pieces`: the assignment's table pieces (ServerChunks::table_pieces()).
  SessionTables(nn::DataParallelModel<float>& model, const std::vector<ChunkInfo>& pieces, TableClient::Caller caller,
                ServerConnections& servers);

  // The rows of every table that `n` examples of `inputs` read, pulled at a version >=
  // min_version into slot `slot` (the promise resolves when they are in).
  // With At::kExactly, of version min_version itself (a takeover).
  kj::Promise<void> fetch(size_t slot, const float* inputs, int64_t n, uint64_t min_version,
                          TableClient::At at = TableClient::At::kLeast);
  // The model reads the sparse tables' rows of slot `slot` (fetched) and writes their gradients
  // there.
  void use(size_t slot);
  // The slot's compact gradients (the model's compute on its rows) pushed in the name of `slice`
  // to every piece; resolves with the replies. With `next` (the slot's next batch, of `shape`),
  // the replies bring that batch's rows at the step's new version, and the slot's next fetch()
  // of them costs no call.
  kj::Promise<void> push(size_t slot, const GradientSlice& slice, kj::Maybe<proto::Batch::Reader> next = nullptr,
                         const BatchShape* shape = nullptr);

  // The newest version slot `slot`'s row pulls have had since the last call (TableClient::
  // take_newest_pulled).
  uint64_t take_newest_pulled(size_t slot) { return this->slot(slot).client.take_newest_pulled(); }
  // Bytes moved since the last call, added to `counts`.
  void drain_counts(ExchangeCounts& counts);
  // fetch() calls, and those the last push's replies had answered.
  uint64_t fetches() const { return fetches_; }
  uint64_t fetched_ahead() const { return fetched_ahead_; }

 private:
  struct Slot {
    Slot(std::vector<nn::SparseTable> tables, const std::vector<ChunkInfo>& pieces, TableClient::Caller caller,
         ServerConnections& servers);
    nn::SparseStep<float> sparse;
    TableClient client;
    std::vector<std::vector<float>> rows;  // per table: ids.size() x dim
    // The next batch's ids and rows, brought by the last push's replies (when `ahead`).
    std::vector<std::vector<uint32_t>> next_ids;
    std::vector<std::vector<float>> next_rows;
    bool ahead = false;
  };
  Slot& slot(size_t index);

  nn::DataParallelModel<float>& model_;
  std::vector<ChunkInfo> pieces_;
  TableClient::Caller caller_;
  ServerConnections& servers_;
  std::vector<std::unique_ptr<Slot>> slots_;  // made on first use
  std::vector<float> next_inputs_, next_targets_;  // a next batch, decoded for its ids
  uint64_t fetches_ = 0, fetched_ahead_ = 0;
};

}  // namespace pstrain
