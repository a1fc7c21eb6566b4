// What the parameter server's RPC files share (parameter_server.cc, factored_push.cc,
// parameter_server_backups.cc): fulfillers shared with copyable callbacks, the version range of a
// shard, a loaded backup. Internal to server/.
//
// Thread rules: everything here lives on the server's RPC thread.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <capnp/blob.h>
#include <kj/async.h>

#include "common/storage/chunk_snapshot.h"
#include "server/parameter_shard.h"

namespace pstrain::server_rpc {

// Shares a KJ fulfiller with the std::function callbacks of ParameterShard (which must be
// copyable); the callbacks only ever run on this thread.
template <typename T>
struct SharedFulfiller {
  std::shared_ptr<kj::Own<kj::PromiseFulfiller<T>>> fulfiller;
  void fulfill(T value) const { (*fulfiller)->fulfill(kj::mv(value)); }
  bool waiting() const { return (*fulfiller)->isWaiting(); }
};

template <typename T>
SharedFulfiller<T> share(kj::Own<kj::PromiseFulfiller<T>> f) {
  return {std::make_shared<kj::Own<kj::PromiseFulfiller<T>>>(kj::mv(f))};
}

// A backup as the store thread read it: its chunks, or why it is unusable.
struct LoadedBackup {
  std::optional<std::map<uint32_t, ChunkSnapshot>> chunks;
  std::string error;
};

// The highest and the lowest version of the shard's chunks (the results of backupAt and versions).
template <typename Results>
void set_version_range(const ParameterShard& shard, Results results) {
  uint64_t highest = 0, lowest = UINT64_MAX;
  for (uint32_t key : shard.keys()) {
    highest = std::max(highest, shard.chunk(key).version);
    lowest = std::min(lowest, shard.chunk(key).version);
  }
  results.setCurrentVersion(highest);
  results.setLowestVersion(lowest == UINT64_MAX ? 0 : lowest);
}

}  // namespace pstrain::server_rpc

namespace pstrain {
// Writes a table piece's `rows` (checked: in the piece) as they were at version `at`
// (table_row_at), float32 row after row, into `out` (rows.size() x chunk.table_dim x 4 bytes);
// throws when the piece no longer holds that version.
void write_table_rows(const ShardChunk& chunk, const std::vector<uint32_t>& rows, uint64_t at,
                      capnp::Data::Builder out);
}  // namespace pstrain
