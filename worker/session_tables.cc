#include "worker/session_tables.h"

namespace pstrain {

SessionTables::Slot::Slot(std::vector<nn::SparseTable> tables, const std::vector<ChunkInfo>& pieces,
                          TableClient::Caller caller, ServerConnections& servers)
    : sparse(tables),
      client(pieces, std::move(tables), std::move(caller), servers),
      rows(sparse.tables().size()),
      next_ids(rows.size()),
      next_rows(rows.size()) {}

SessionTables::SessionTables(nn::DataParallelModel<float>& model, const std::vector<ChunkInfo>& pieces,
                             TableClient::Caller caller, ServerConnections& servers)
    : model_(model), pieces_(pieces), caller_(std::move(caller)), servers_(servers) {
  slot(kOwn);  // checks the pieces against the model's tables now
}

SessionTables::Slot& SessionTables::slot(size_t index) {
  if (slots_.size() <= index) slots_.resize(index + 1);
  if (!slots_[index]) slots_[index] = std::make_unique<Slot>(model_.sparse_tables(), pieces_, caller_, servers_);
  return *slots_[index];
}

kj::Promise<void> SessionTables::fetch(size_t index, const float* inputs, int64_t n, uint64_t min_version,
                                       TableClient::At at) {
  Slot& s = slot(index);
  s.sparse.collect(inputs, model_.input_size(), n);
  ++fetches_;
  bool ahead = s.ahead && at == TableClient::At::kLeast;
  s.ahead = false;
  for (size_t t = 0; ahead && t < s.rows.size(); ++t) ahead = s.next_ids[t] == s.sparse.ids(t);
  if (ahead) {  // the rows came with the last push's replies, at the version this step reads
    for (size_t t = 0; t < s.rows.size(); ++t) std::swap(s.rows[t], s.next_rows[t]);
    ++fetched_ahead_;
    return kj::READY_NOW;
  }
  auto pulls = kj::heapArrayBuilder<kj::Promise<void>>(s.rows.size());
  for (size_t t = 0; t < s.rows.size(); ++t) {
    const std::vector<uint32_t>& ids = s.sparse.ids(t);
    s.rows[t].resize(ids.size() * static_cast<size_t>(s.sparse.tables()[t].dim));
    pulls.add(s.client.pull(t, ids, min_version, at, s.rows[t].data()));
  }
  return kj::joinPromises(pulls.finish());
}

void SessionTables::use(size_t index) {
  Slot& s = slot(index);
  for (size_t t = 0; t < s.rows.size(); ++t) s.sparse.point_into_compact(t, s.rows[t].data());
  model_.use_sparse_rows(s.sparse.rows());
}

kj::Promise<void> SessionTables::push(size_t index, const GradientSlice& slice, kj::Maybe<proto::Batch::Reader> next,
                                      const BatchShape* shape) {
  Slot& s = slot(index);
  s.ahead = false;
  KJ_IF_MAYBE(batch, next) {
    KJ_REQUIRE(shape != nullptr && batch->getSize() <= model_.max_batch(), "a next batch without its shape");
    next_inputs_.resize(static_cast<size_t>(model_.input_size() * model_.max_batch()));
    next_targets_.resize(static_cast<size_t>(model_.target_size() * model_.max_batch()));
    decode_batch(*batch, *shape, next_inputs_.data(), next_targets_.data());
    for (size_t t = 0; t < s.rows.size(); ++t) {
      nn::collect_ids(s.sparse.tables()[t], next_inputs_.data(), model_.input_size(), batch->getSize(), s.next_ids[t]);
      s.next_rows[t].resize(s.next_ids[t].size() * static_cast<size_t>(s.sparse.tables()[t].dim));
    }
  } else {
    for (auto& ids : s.next_ids) ids.clear();
  }
  std::vector<TableClient::TablePush> parts(s.rows.size());
  for (size_t t = 0; t < s.rows.size(); ++t) {
    parts[t] = {s.sparse.ids(t), s.sparse.grads(t), s.next_ids[t], s.next_rows[t].data()};
  }
  const bool ahead = next != nullptr;
  return s.client.push(slice, parts).then([&s, ahead] { s.ahead = ahead; });
}

void SessionTables::drain_counts(ExchangeCounts& counts) {
  for (auto& s : slots_) {
    if (!s) continue;
    ExchangeCounts& c = s->client.counts();
    counts.pushed_bytes += c.pushed_bytes;
    counts.pulled_bytes += c.pulled_bytes;
    counts.late_pushes += c.late_pushes;
    c = ExchangeCounts{};
  }
}

}  // namespace pstrain
