#include "worker/table_client.h"

#include <algorithm>
#include <cstring>

#include "common/rpc/message_limits.h"

namespace pstrain {

namespace {

void set_rows(capnp::List<uint32_t>::Builder list, const std::vector<uint32_t>& rows) {
  for (unsigned i = 0; i < rows.size(); ++i) list.set(i, rows[i]);
}

}  // namespace

TableClient::TableClient(const std::vector<ChunkInfo>& chunks, std::vector<nn::SparseTable> tables, Caller caller,
                         ServerConnections& servers)
    : tables_(std::move(tables)),
      pieces_(tables_.size()),
      strides_(tables_.size(), 0),
      caller_(std::move(caller)),
      servers_(servers) {
  for (const ChunkInfo& c : chunks) {
    if (!c.is_table_piece()) continue;
    size_t t = 0;
    while (t < tables_.size() && tables_[t].param != c.param) ++t;
    KJ_REQUIRE(t < tables_.size(), "a table piece of a tensor that is no sparse table", c.key, c.param);
    KJ_REQUIRE(c.server < servers_.size() && c.offset < c.stride, "a table piece on no server", c.key);
    KJ_REQUIRE(strides_[t] == 0 || strides_[t] == c.stride, "a table's pieces of different strides", c.key);
    strides_[t] = c.stride;
    std::vector<Piece>& pieces = pieces_[t];
    if (pieces.size() <= c.offset) pieces.resize(c.offset + 1);
    pieces[c.offset].key = c.key;
    pieces[c.offset].server = c.server;
  }
  for (size_t t = 0; t < tables_.size(); ++t) {
    const auto expected = static_cast<size_t>(std::min<int64_t>(tables_[t].rows, strides_[t]));
    KJ_REQUIRE(strides_[t] > 0 && pieces_[t].size() == expected, "a sparse table without all of its pieces", t,
               pieces_[t].size());
  }
}

void TableClient::split(size_t t, std::span<const uint32_t> ids, std::vector<std::vector<uint32_t>>& rows,
                        std::vector<std::vector<size_t>>& at) const {
  rows.assign(pieces_[t].size(), {});
  at.assign(pieces_[t].size(), {});
  for (size_t i = 0; i < ids.size(); ++i) {
    const uint32_t p = ids[i] % strides_[t];
    KJ_REQUIRE(p < rows.size(), "an id beyond the table", ids[i]);
    rows[p].push_back(ids[i]);
    at[p].push_back(i);
  }
}

void TableClient::place(capnp::Data::Reader values, const std::vector<size_t>& at, size_t dim, float* out) {
  KJ_REQUIRE(values.size() == at.size() * dim * sizeof(float), "a reply with other rows than asked for",
             values.size(), at.size());
  for (size_t i = 0; i < at.size(); ++i) {
    std::memcpy(out + at[i] * dim, values.begin() + i * dim * sizeof(float), dim * sizeof(float));
  }
}

kj::Promise<void> TableClient::pull(size_t t, std::span<const uint32_t> ids, uint64_t version, At which, float* out) {
  std::vector<std::vector<uint32_t>> rows;
  std::vector<std::vector<size_t>> at;
  split(t, ids, rows, at);
  const auto dim = static_cast<size_t>(tables_[t].dim);
  kj::Vector<kj::Promise<void>> pulls;
  for (size_t p = 0; p < rows.size(); ++p) {
    if (rows[p].empty()) continue;
    Piece& piece = pieces_[t][p];
    auto request = servers_[piece.server].pullRowsRequest();
    request.setJobId(caller_.job_id);
    request.setKey(piece.key);
    request.setMinVersion(version);
    request.setExact(which == At::kExactly);
    caller_.pass.set_on(request);
    set_rows(request.initRows(static_cast<unsigned>(rows[p].size())), rows[p]);
    pulls.add(request.send().then(
        [this, &piece, at = std::move(at[p]), dim, out](capnp::Response<proto::ParameterServer::PullRowsResults>&& r) {
          place(r.getValues(), at, dim, out);
          piece.version = r.getVersion();
          newest_pulled_ = std::max(newest_pulled_, piece.version);
          counts_.pulled_bytes += r.getValues().size();
        }));
  }
  return kj::joinPromises(pulls.releaseAsArray());
}

void TableClient::fill_push(size_t t, size_t p, const GradientSlice& slice,
                            proto::ParameterServer::PushParams::Builder request) {
  const Piece& piece = pieces_[t][p];
  request.setJobId(caller_.job_id);
  request.setKey(piece.key);
  request.setStep(slice.step);
  request.setSlice(slice.slice);
  request.setSliceCount(slice.slice_count);
  request.setWorker(slice.slice);
  caller_.pass.set_on(request);
  request.setExamples(slice.examples);
  request.setBaseVersion(piece.version);
  request.setGeneration(caller_.generation);
  request.setLrScale(slice.lr_scale);
  auto table = request.getGradient().initTableRows();
  set_rows(table.initRows(static_cast<unsigned>(piece.rows.size())), piece.rows);
  if (!piece.grads.empty()) {  // (no rows: no values, not a null pointer's)
    table.setValues(capnp::Data::Reader(reinterpret_cast<const kj::byte*>(piece.grads.data()),
                                        piece.grads.size() * sizeof(float)));
  }
  set_rows(request.getReply().initTableRows(static_cast<unsigned>(piece.reply_rows.size())), piece.reply_rows);
}

kj::Promise<void> TableClient::push(const GradientSlice& slice, std::span<const TablePush> tables) {
  KJ_REQUIRE(tables.size() == tables_.size(), "a push of other tables", tables.size());
  // Every piece's rows, gradient and reply rows; then the pieces by server.
  struct Entry {
    size_t table, piece;
  };
  std::vector<std::vector<Entry>> by_server(servers_.size());
  std::vector<std::vector<uint32_t>> rows, reply_rows;
  std::vector<std::vector<size_t>> at, reply_at;
  for (size_t t = 0; t < tables_.size(); ++t) {
    const TablePush& part = tables[t];
    const auto dim = static_cast<size_t>(tables_[t].dim);
    KJ_REQUIRE(part.grads.size() == part.ids.size() * dim, "a compact gradient of other rows", part.grads.size(),
               part.ids.size());
    split(t, part.ids, rows, at);
    split(t, part.next_ids, reply_rows, reply_at);
    for (size_t p = 0; p < pieces_[t].size(); ++p) {
      Piece& piece = pieces_[t][p];
      piece.rows = std::move(rows[p]);
      piece.reply_rows = std::move(reply_rows[p]);
      piece.reply_at = std::move(reply_at[p]);
      piece.grads.resize(piece.rows.size() * dim);
      for (size_t i = 0; i < at[p].size(); ++i) {
        std::memcpy(piece.grads.data() + i * dim, part.grads.data() + at[p][i] * dim, dim * sizeof(float));
      }
      counts_.pushed_bytes += (piece.grads.size() + piece.rows.size()) * sizeof(float);
      by_server[piece.server].push_back({t, p});
    }
  }
  kj::Vector<kj::Promise<void>> calls;
  for (size_t server = 0; server < by_server.size(); ++server) {
    const std::vector<Entry>& entries = by_server[server];
    for (size_t first = 0; first < entries.size(); first += rpc::kMaxBatchedPushes) {
      const size_t n = std::min(rpc::kMaxBatchedPushes, entries.size() - first);
      auto request = servers_[server].pushBatchRequest();
      auto list = request.initPushes(static_cast<unsigned>(n));
      std::vector<Entry> sent(entries.begin() + static_cast<std::ptrdiff_t>(first),
                              entries.begin() + static_cast<std::ptrdiff_t>(first + n));
      for (unsigned i = 0; i < n; ++i) fill_push(sent[i].table, sent[i].piece, slice, list[i]);
      std::vector<float*> outs;
      for (const Entry& e : sent) outs.push_back(tables[e.table].next_out);
      calls.add(request.send().then([this, sent = std::move(sent), outs = std::move(outs)](
                                        capnp::Response<proto::ParameterServer::PushBatchResults>&& r) {
        const auto results = r.getResults();
        KJ_REQUIRE(results.size() == sent.size(), "a pushBatch reply of other pieces", results.size());
        for (unsigned i = 0; i < sent.size(); ++i) {
          Piece& piece = pieces_[sent[i].table][sent[i].piece];
          const auto reply = results[i];
          KJ_REQUIRE(reply.getValues().isRows(), "a table piece's reply without rows", piece.key);
          place(reply.getValues().getRows(), piece.reply_at, static_cast<size_t>(tables_[sent[i].table].dim), outs[i]);
          piece.version = reply.getVersion();
          counts_.count_reply(reply.getApplied());
          counts_.pulled_bytes += reply.getValues().getRows().size();
        }
      }));
    }
  }
  return kj::joinPromises(calls.releaseAsArray());
}

}  // namespace pstrain
