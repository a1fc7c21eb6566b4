#include "coordinator/job/server_group.h"

#include <algorithm>
#include <cstring>
#include <set>

namespace pstrain {

ServerGroup::ServerGroup(std::string job_id, kj::AsyncIoProvider& io, const JobOptions& options)
    : job_id_(std::move(job_id)), io_(io), options_(options) {
  if (!options_.coordinator_key.empty()) {
    pass_ = {rpc::kCoordinatorNode, rpc::worker_token(rpc::job_key(options_.coordinator_key, job_id_), rpc::kCoordinatorNode)};
  }
}

void ServerGroup::assign(std::vector<ServerMember> members) {
  members_ = std::move(members);
  connections_.clear();
  connections_.resize(members_.size());
  clients_.clear();
  for (size_t i = 0; i < members_.size(); ++i) clients_.push_back(nullptr);
}

void ServerGroup::replace(size_t index, ServerMember member) { members_[index] = std::move(member); }

std::optional<size_t> ServerGroup::index_of(NodeId node) const {
  for (size_t i = 0; i < members_.size(); ++i) {
    if (members_[i].node == node) return i;
  }
  return std::nullopt;
}

std::vector<NodeId> ServerGroup::nodes() const {
  std::vector<NodeId> out;
  for (const auto& m : members_) out.push_back(m.node);
  return out;
}

std::vector<std::string> ServerGroup::names() const {
  std::vector<std::string> out;
  for (const auto& m : members_) out.push_back(m.name);
  return out;
}

std::vector<std::string> ServerGroup::addresses() const {
  std::vector<std::string> out;
  for (const auto& m : members_) out.push_back(m.address);
  return out;
}

kj::Promise<void> ServerGroup::timed(kj::Promise<void> promise) {
  return io_.getTimer().timeoutAfter(options_.server_call_timeout, kj::mv(promise));
}

template <typename T, typename Call>
kj::Promise<kj::Array<T>> ServerGroup::each(Call&& call) {
  kj::Vector<kj::Promise<T>> calls;
  for (size_t i = 0; i < clients_.size(); ++i) calls.add(call(clients_[i], i));
  return io_.getTimer().timeoutAfter(options_.server_call_timeout, kj::joinPromises(calls.releaseAsArray()));
}

template <typename Call>
kj::Promise<void> ServerGroup::each_void(Call&& call) {
  kj::Vector<kj::Promise<void>> calls;
  for (size_t i = 0; i < clients_.size(); ++i) calls.add(call(clients_[i], i));
  return timed(kj::joinPromises(calls.releaseAsArray()));
}

kj::Promise<void> ServerGroup::connect(size_t index) {
  const rpc::HostPort address = rpc::parse_host_port(members_[index].address, 7100, "server address");
  return timed(rpc::connect(io_, address, options_.cluster).then([this, index](kj::Own<rpc::Connection> c) {
    connections_[index] = kj::mv(c);
    clients_[index] = connections_[index]->bootstrap().castAs<proto::ParameterServer>();
  }));
}

kj::Promise<void> ServerGroup::connect_all() {
  kj::Vector<kj::Promise<void>> ready;
  for (size_t i = 0; i < members_.size(); ++i) ready.add(connect(i));
  return kj::joinPromises(ready.releaseAsArray());
}

kj::Promise<void> ServerGroup::configure(size_t index, const ConfigFiller& fill) {
  auto request = clients_[index].configureRequest();
  auto config = request.initConfig();
  fill(config);
  config.setServerIndex(static_cast<uint32_t>(index));
  return timed(request.send().ignoreResult());
}

kj::Promise<void> ServerGroup::configure_all(const ConfigFiller& fill) {
  kj::Vector<kj::Promise<void>> configured;
  for (size_t i = 0; i < members_.size(); ++i) configured.add(configure(i, fill));
  return kj::joinPromises(configured.releaseAsArray());
}

kj::Promise<kj::Array<ServerVersions>> ServerGroup::versions() {
  return each<ServerVersions>([this](proto::ParameterServer::Client& client, size_t) {
    auto request = client.versionsRequest();
    request.setJobId(job_id_);
    return request.send().then([](auto&& r) { return ServerVersions{r.getLowestVersion(), r.getCurrentVersion()}; });
  });
}

kj::Promise<kj::Array<bool>> ServerGroup::probe(uint64_t* reached) {
  kj::Vector<kj::Promise<bool>> probes;
  for (auto& client : clients_) {
    auto request = client.versionsRequest();  // reads no storage: a cheap "are you there?"
    request.setJobId(job_id_);
    probes.add(io_.getTimer()
                   .timeoutAfter(options_.server_probe_timeout, request.send().then([reached](auto&& r) {
                     *reached = std::max(*reached, r.getCurrentVersion());
                     return true;
                   }))
                   .catch_([](kj::Exception&&) { return false; }));
  }
  return kj::joinPromises(probes.releaseAsArray());
}

kj::Promise<std::vector<uint64_t>> ServerGroup::common_backups() {
  return each<std::vector<uint64_t>>([this](proto::ParameterServer::Client& client, size_t) {
           auto request = client.backupsRequest();
           request.setJobId(job_id_);
           return request.send().then([](auto&& r) {
             std::vector<uint64_t> v;
             for (uint64_t x : r.getVersions()) v.push_back(x);
             return v;
           });
         })
      .then([](kj::Array<std::vector<uint64_t>> all) {
        std::set<uint64_t> common(all[0].begin(), all[0].end());
        for (size_t i = 1; i < all.size(); ++i) {
          std::set<uint64_t> next;
          for (uint64_t v : all[i]) {
            if (common.count(v) != 0) next.insert(v);
          }
          common = std::move(next);
        }
        return std::vector<uint64_t>(common.begin(), common.end());
      });
}

kj::Promise<void> ServerGroup::restore(uint64_t version, bool from_scratch, uint64_t generation) {
  return each_void([&](proto::ParameterServer::Client& client, size_t) {
    auto request = client.restoreRequest();
    request.setJobId(job_id_);
    request.setVersion(version);
    request.setFromScratch(from_scratch);
    request.setGeneration(generation);
    return request.send().ignoreResult();
  });
}

kj::Promise<void> ServerGroup::settle(uint64_t version, uint64_t generation) {
  return each_void([&](proto::ParameterServer::Client& client, size_t) {
    auto request = client.settleRequest();
    request.setJobId(job_id_);
    request.setVersion(version);
    request.setGeneration(generation);
    return request.send().ignoreResult();
  });
}

kj::Promise<void> ServerGroup::settle_and_release(uint64_t version, uint64_t generation) {
  return each_void([&](proto::ParameterServer::Client& client, size_t) {
    auto settle = client.settleRequest();
    settle.setJobId(job_id_);
    settle.setVersion(version);
    settle.setGeneration(generation);
    auto release = client.releaseHoldRequest();
    release.setJobId(job_id_);
    return settle.send().ignoreResult().then([release = kj::mv(release)]() mutable {
      return release.send().ignoreResult();
    });
  });
}

kj::Promise<kj::Array<uint64_t>> ServerGroup::mark_backup(uint64_t version) {
  return each<uint64_t>([&](proto::ParameterServer::Client& client, size_t) {
    auto request = client.backupAtRequest();
    request.setJobId(job_id_);
    request.setVersion(version);
    return request.send().then([](auto&& r) { return r.getCurrentVersion(); });
  });
}

kj::Promise<void> ServerGroup::backup_now(uint64_t version) {
  return each_void([&](proto::ParameterServer::Client& client, size_t) {
    auto request = client.backupNowRequest();
    request.setJobId(job_id_);
    request.setVersion(version);
    return request.send().ignoreResult();
  });
}

void ServerGroup::release_holds() {
  for (auto& client : clients_) {
    auto request = client.releaseHoldRequest();
    request.setJobId(job_id_);
    request.send().detach([](kj::Exception&&) {});
  }
}

void ServerGroup::drop_job() {
  for (auto& client : clients_) {
    auto request = client.dropJobRequest();
    request.setJobId(job_id_);
    request.send().detach([](kj::Exception&&) {});
  }
}

void ServerGroup::worker_finished(uint32_t worker) {
  for (auto& client : clients_) {
    auto request = client.workerFinishedRequest();
    request.setJobId(job_id_);
    request.setWorker(worker);
    pass_.set_on(request);
    request.send().detach([](kj::Exception&&) {});
  }
}

kj::Promise<void> ServerGroup::adopt_backup(size_t index, uint64_t version, const std::vector<std::string>& chunks,
                                            size_t first, size_t total) {
  auto request = clients_[index].adoptBackupRequest();
  request.setJobId(job_id_);
  request.setVersion(version);
  request.setFirst(static_cast<uint32_t>(first));
  request.setTotal(static_cast<uint32_t>(total));
  auto list = request.initChunks(static_cast<unsigned>(chunks.size()));
  for (size_t c = 0; c < chunks.size(); ++c) {
    list.set(static_cast<unsigned>(c),
             capnp::Data::Reader(reinterpret_cast<const kj::byte*>(chunks[c].data()), chunks[c].size()));
  }
  return timed(request.send().ignoreResult());
}

kj::Promise<kj::Array<kj::Array<float>>> ServerGroup::pull_chunks(const std::vector<ChunkInfo>& chunks) {
  kj::Vector<kj::Promise<kj::Array<float>>> pulls;
  for (const ChunkInfo& chunk : chunks) {
    auto request = clients_[chunk.server].pullRequest();
    request.setJobId(job_id_);
    request.setKey(chunk.key);
    request.setMinVersion(0);
    pass_.set_on(request);
    pulls.add(request.send().then([chunk](capnp::Response<proto::ParameterServer::PullResults>&& r) {
      const auto values = rpc::tensor_view(r.getValues(), chunk.size, "final parameters");
      return kj::heapArray<float>(values.data(), values.size());
    }));
  }
  return io_.getTimer().timeoutAfter(options_.server_call_timeout, kj::joinPromises(pulls.releaseAsArray()));
}

kj::Promise<kj::Array<float>> ServerGroup::pull_table_rows(const std::vector<ChunkInfo>& pieces, size_t first,
                                                          size_t count, size_t dim) {
  auto out = kj::heapArray<float>(count * dim);
  kj::Vector<kj::Promise<void>> pulls;
  for (const ChunkInfo& piece : pieces) {
    // This piece's rows in the block: offset, offset + stride, ... from the first at or after `first`.
    size_t row = first + (piece.offset + piece.stride - first % piece.stride) % piece.stride;
    std::vector<uint32_t> rows;
    for (; row < first + count; row += piece.stride) rows.push_back(static_cast<uint32_t>(row));
    if (rows.empty()) continue;
    auto request = clients_[piece.server].pullRowsRequest();
    request.setJobId(job_id_);
    request.setKey(piece.key);
    request.setMinVersion(0);
    pass_.set_on(request);
    auto list = request.initRows(static_cast<unsigned>(rows.size()));
    for (unsigned i = 0; i < rows.size(); ++i) list.set(i, rows[i]);
    pulls.add(request.send().then([rows = std::move(rows), first, dim, to = out.begin()](
                                      capnp::Response<proto::ParameterServer::PullRowsResults>&& r) {
      const auto values = r.getValues();
      KJ_REQUIRE(values.size() == rows.size() * dim * sizeof(float), "a table piece's reply with other rows than asked for");
      for (size_t i = 0; i < rows.size(); ++i) {
        std::memcpy(to + (rows[i] - first) * dim, values.begin() + i * dim * sizeof(float), dim * sizeof(float));
      }
    }));
  }
  auto all = kj::joinPromises(pulls.releaseAsArray()).then([out = kj::mv(out)]() mutable { return kj::mv(out); });
  return io_.getTimer().timeoutAfter(options_.server_call_timeout, kj::mv(all));
}

}  // namespace pstrain
