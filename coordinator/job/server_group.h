// The parameter servers of one job, by server index: who they are (node id, name, address), the
// connections to them, and every call the job makes to them. A call to all servers is one
// joined promise; every call has JobOptions::server_call_timeout (the probe its own, shorter one).
//
// The index of a server is its place in the job's chunk table (ChunkInfo::server); the node
// behind an index changes when a lost server restarts under its name or a free server takes its
// shard over (replace()).
//
// Thread rules: event-loop thread only. Owns the connections; the promises it returns refer to
// it, so it must outlive them (JobRunner owns both).
#pragma once

#include <kj/async-io.h>

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "common/engine/chunk_plan.h"
#include "common/base/ids.h"
#include "common/engine/param_layout.h"
#include "common/rpc/proto/pstrain.capnp.h"
#include "common/rpc/rpc_util.h"
#include "coordinator/job/job_options.h"

namespace pstrain {

struct ServerMember {
  NodeId node;
  std::string name, address;
};

// Where a server's chunks of the job stand.
struct ServerVersions {
  uint64_t lowest = 0, highest = 0;
};

class ServerGroup {
 public:
  ServerGroup(std::string job_id, kj::AsyncIoProvider& io, const JobOptions& options);

  // Membership.
  void assign(std::vector<ServerMember> members);
  void replace(size_t index, ServerMember member);
  size_t size() const { return members_.size(); }
  const ServerMember& operator[](size_t index) const { return members_[index]; }
  std::optional<size_t> index_of(NodeId node) const;
  std::vector<NodeId> nodes() const;
  std::vector<std::string> names() const;
  std::vector<std::string> addresses() const;

  // Connections.
  kj::Promise<void> connect(size_t index);
  kj::Promise<void> connect_all();

  // One server's configuration (fresh shard): `fill` writes the JobConfig (all but serverIndex).
  using ConfigFiller = std::function<void(proto::JobConfig::Builder)>;
  kj::Promise<void> configure(size_t index, const ConfigFiller& fill);
  kj::Promise<void> configure_all(const ConfigFiller& fill);

  // Queries.
  kj::Promise<kj::Array<ServerVersions>> versions();
  // Asks every server where it stands, with the probe timeout: for each, whether it answered;
  // `*reached` is raised to the highest version an answering server reports.
  kj::Promise<kj::Array<bool>> probe(uint64_t* reached);
  // The backups every server holds (oldest first on each server; the intersection, ascending).
  kj::Promise<std::vector<uint64_t>> common_backups();

  // Commands to every server.
  kj::Promise<void> restore(uint64_t version, bool from_scratch, uint64_t generation);
  kj::Promise<void> settle(uint64_t version, uint64_t generation);
  // Settles every server, then lifts any cut hold (in that order on each: lifted first, a hold
  // could let an old plan's step apply).
  kj::Promise<void> settle_and_release(uint64_t version, uint64_t generation);
  // backupAt(version) on every server: each one's highest version after the mark.
  kj::Promise<kj::Array<uint64_t>> mark_backup(uint64_t version);
  kj::Promise<void> backup_now(uint64_t version);
  // Fire and forget: errors are ignored (a lost server has nothing to release or drop).
  void release_holds();
  void drop_job();
  void worker_finished(uint32_t worker);

  // One server takes part of another's backup (its replica) into its store: chunks first ..
  // first + chunks.size() - 1 of `total` (at most rpc::kMaxPartBytes of them).
  kj::Promise<void> adopt_backup(size_t index, uint64_t version, const std::vector<std::string>& chunks, size_t first,
                                 size_t total);
  // The values (any version) of `chunks`, all pulled at once (the caller keeps the list short:
  // the final parameters are collected a few chunks at a time), in the order given.
  kj::Promise<kj::Array<kj::Array<float>>> pull_chunks(const std::vector<ChunkInfo>& chunks);
  // Rows first .. first + count - 1 of a sparse table (any version; `dim` floats each) from its
  // `pieces` (one per server, by server: ParameterServer.pullRows), in row order.
  kj::Promise<kj::Array<float>> pull_table_rows(const std::vector<ChunkInfo>& pieces, size_t first, size_t count,
                                                size_t dim);

 private:
  // `call(client, index)` on every server, joined, under the call timeout.
  template <typename T, typename Call>
  kj::Promise<kj::Array<T>> each(Call&& call);
  template <typename Call>
  kj::Promise<void> each_void(Call&& call);
  kj::Promise<void> timed(kj::Promise<void> promise);

  std::string job_id_;
  kj::AsyncIoProvider& io_;
  const JobOptions& options_;
  rpc::WorkerPass pass_;  // what the coordinator's own pulls and workerFinished calls carry
  std::vector<ServerMember> members_;
  std::vector<kj::Own<rpc::Connection>> connections_;
  std::vector<proto::ParameterServer::Client> clients_;
};

}  // namespace pstrain
