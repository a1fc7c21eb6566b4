// The parameter server's calls on sparse table pieces (parameter_server.h, server/table_piece.h):
// a push's compact rows checked and copied out, a reply's rows, and ParameterServer.pullRows. A
// piece is never sent whole: every read names its rows.
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "common/base/error.h"
#include "common/base/log.h"
#include "common/rpc/rpc_util.h"
#include "server/parameter_server.h"
#include "server/server_rpc_helpers.h"
#include "server/table_piece.h"

namespace pstrain {

using server_rpc::share;

namespace {

std::vector<uint32_t> read_rows(capnp::List<uint32_t>::Reader list) {
  std::vector<uint32_t> rows(list.size());
  for (unsigned i = 0; i < list.size(); ++i) rows[i] = list[i];
  return rows;
}

// Fails the call naming `field` unless `rows` are rows of the piece (ascending, inside it).
void require_piece_rows(const ShardChunk& chunk, const std::vector<uint32_t>& rows, const char* field) {
  const std::string error = table_push_error(chunk, rows, rows.size() * chunk.table_dim);
  KJ_REQUIRE(error.empty(), field, error);
}

}  // namespace

void write_table_rows(const ShardChunk& chunk, const std::vector<uint32_t>& rows, uint64_t at,
                      capnp::Data::Builder out) {
  const size_t dim = chunk.table_dim;
  for (size_t i = 0; i < rows.size(); ++i) {
    const float* row = table_row_at(chunk, piece_row(chunk.info, rows[i]), at);
    KJ_REQUIRE(row != nullptr, "this server no longer holds that version of the piece", chunk.info.key, at,
               chunk.version);
    std::memcpy(out.begin() + i * dim * sizeof(float), row, dim * sizeof(float));
  }
}

void ParameterServerImpl::check_table_push(const ShardChunk& chunk, proto::ParameterServer::PushParams::Reader params,
                                           CheckedPush& push) {
  const auto gradient = params.getGradient();
  const auto reply = params.getReply();
  KJ_REQUIRE(chunk.info.is_table_piece(), "gradient.tableRows and reply.tableRows are for a sparse table's pieces",
             chunk.info.key);
  KJ_REQUIRE(gradient.isTableRows(), "a sparse table's piece takes gradient.tableRows", chunk.info.key);
  KJ_REQUIRE(reply.isTableRows(), "a sparse table's piece replies with reply.tableRows (never whole)",
             chunk.info.key);
  KJ_REQUIRE(params.getWorkerState().size() == 0 && !params.getReplyHalf() && !params.getReplyBfloat16(),
             "workerState, replyHalf and replyBfloat16 are not for a sparse table's piece");
  const auto table_rows = gradient.getTableRows();
  push.rows = std::make_shared<std::vector<uint32_t>>(read_rows(table_rows.getRows()));
  require_piece_rows(chunk, *push.rows, "gradient.tableRows.rows");
  const auto values = table_rows.getValues();
  const size_t floats = push.rows->size() * chunk.table_dim;
  KJ_REQUIRE(values.size() == floats * sizeof(float),
             "gradient.tableRows.values must hold the rows' gradients, float32, the table's width each", values.size(),
             floats);
  // Copied out: Data has no alignment guarantee for float.
  push.decoded = std::make_shared<std::vector<float>>(floats);
  if (floats > 0) std::memcpy(push.decoded->data(), values.begin(), values.size());
  push.request.rows = *push.rows;
  push.request.gradient = *push.decoded;
  push.bytes_in += values.size() + push.rows->size() * sizeof(uint32_t);
  push.reply_rows = read_rows(reply.getTableRows());
  require_piece_rows(chunk, push.reply_rows, "reply.tableRows");
}

kj::Promise<void> ParameterServerImpl::pullRows(PullRowsContext context) {
  const auto params = context.getParams();
  const std::string job_id = rpc::to_string(params.getJobId());
  Job& job = find(params.getJobId());
  check_worker(job, params.getJobId(), params.getNode(), params.getToken());
  const uint32_t key = params.getKey();
  ParameterShard& shard = shard_with_key(job, params.getJobId(), key);
  const ShardChunk& chunk = shard.chunk(key);
  KJ_REQUIRE(chunk.info.is_table_piece(), "pullRows is for a sparse table's pieces", key);
  std::vector<uint32_t> rows = read_rows(params.getRows());
  require_piece_rows(chunk, rows, "rows");
  const uint64_t wanted = params.getMinVersion();
  const bool exact = params.getExact();
  auto reply = [context, job_id, key, wanted, exact, rows = std::move(rows)](std::shared_ptr<Job> job) mutable {
    const ShardChunk& piece = job->shard->chunk(key);
    const uint64_t at = exact ? wanted : piece.version;
    if (at < piece.version) {  // rare: a takeover after the lost worker's push completed the step here
      PSLOG(kInfo) << "job " << job_id << ": piece " << key << "'s rows of version " << at << " (it is at "
                   << piece.version << ") for a takeover";
    }
    auto results = context.getResults();
    results.setVersion(at);
    auto out = results.initValues(static_cast<unsigned>(rows.size() * piece.table_dim * sizeof(float)));
    write_table_rows(piece, rows, at, out);
    job->bytes_out += out.size();
  };
  return when_at_version(shard, job_id, key, wanted).then(kj::mv(reply));
}

}  // namespace pstrain
