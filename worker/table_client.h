// The model's sparse embedding tables on the servers as one worker sees them (docs/DESIGN-NOTES.md
// "Sparse models", server/table_piece.h): which piece holds a row (row r in piece r mod the
// table's stride, on server r mod S), a step's rows pulled compact (ParameterServer.pullRows),
// and a slice's compact gradients pushed piece by piece (gradient.tableRows), every piece of a
// server in one pushBatch, with the rows the next step needs in the replies (reply.tableRows). A
// worker never holds a whole table: only the rows of the batches in hand.
//
// A push goes to every piece of every table, with or without rows: a sync step on a piece waits
// for every slice's push.
//
// Thread rules: the event loop's thread only. Ownership: the caller's connections outlive this;
// a push's promise must be waited for (or dropped) before the next push (the per-piece buffers
// are reused).
#pragma once

#include <kj/async.h>

#include <cstdint>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "common/engine/chunk_plan.h"
#include "common/engine/nn/sparse_rows.h"
#include "common/rpc/cluster_auth.h"
#include "worker/server_chunks.h"
#include "worker/server_connections.h"

namespace pstrain {

class TableClient {
 public:
  // Who calls: the job, this worker's pass and the generation of its plan (as ServerChunks').
  struct Caller {
    std::string job_id;
    rpc::WorkerPass pass;
    uint64_t generation = 0;
  };

  // Throws (KJ_REQUIRE) unless `chunks` hold a piece of every table on every server that has rows
  // of it, and nothing else of the tables.
  TableClient(const std::vector<ChunkInfo>& chunks, std::vector<nn::SparseTable> tables, Caller caller,
              ServerConnections& servers);

  const std::vector<nn::SparseTable>& tables() const { return tables_; }

  // Which rows a pull asks for: at a version >= the one named, or of exactly that version (a sync
  // takeover: a piece the lost worker's push reached has moved one update on; pullRows' exact).
  enum class At { kLeast, kExactly };
  // Rows `ids` (ascending, distinct) of table t at version `version` (`which`) into `out` (ids.size()
  // x dim, in the order of ids).
  kj::Promise<void> pull(size_t t, std::span<const uint32_t> ids, uint64_t version, At which, float* out);
  // The newest version a pull's reply has had since the last call (0: none), and resets it: a
  // sync takeover checks that no piece it read is newer than the step.
  uint64_t take_newest_pulled() { return std::exchange(newest_pulled_, 0); }

  // One table's part of a push: its compact gradient (`grads`: ids.size() x dim, of rows `ids`,
  // ascending and distinct) and the rows the replies bring back (`next_ids`, ascending, distinct;
  // empty: none) into `next_out` (next_ids.size() x dim).
  struct TablePush {
    std::span<const uint32_t> ids;
    std::span<const float> grads;
    std::span<const uint32_t> next_ids;
    float* next_out = nullptr;
  };
  // Every table's compact gradient of `slice` (`tables[t]` for table t) to every piece, in one
  // pushBatch per server (at most rpc::kMaxBatchedPushes pieces a call); the replies bring each
  // table's next rows at the step's new version. slice.gradient is not read.
  kj::Promise<void> push(const GradientSlice& slice, std::span<const TablePush> tables);

  ExchangeCounts& counts() { return counts_; }

 private:
  struct Piece {
    uint32_t key = 0, server = 0;
    uint64_t version = 0;  // the version its last reply had
    // The rows of the current push and its reply, and the gradient sent (kept until the reply).
    std::vector<uint32_t> rows, reply_rows;
    std::vector<size_t> reply_at;  // reply_rows[i] is next_ids[reply_at[i]]
    std::vector<float> grads;
  };
  // Splits ascending `ids` of table t by piece: piece p's rows, and where each sits in ids.
  void split(size_t t, std::span<const uint32_t> ids, std::vector<std::vector<uint32_t>>& rows,
             std::vector<std::vector<size_t>>& at) const;
  // Copies `rows` row values (rows.size() x dim, from a reply) to their places `at` in `out`.
  static void place(capnp::Data::Reader values, const std::vector<size_t>& at, size_t dim, float* out);
  // Piece p of table t's push of `slice` into `params` (its rows and gradient set by push()).
  void fill_push(size_t t, size_t p, const GradientSlice& slice, proto::ParameterServer::PushParams::Builder params);

  std::vector<nn::SparseTable> tables_;
  // Per table: its pieces by first row (row r in piece r mod stride), and the stride.
  std::vector<std::vector<Piece>> pieces_;
  std::vector<uint32_t> strides_;
  Caller caller_;
  ServerConnections& servers_;
  ExchangeCounts counts_;
  uint64_t newest_pulled_ = 0;  // take_newest_pulled
};

}  // namespace pstrain
