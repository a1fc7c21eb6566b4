// Helpers for tests that call a parameter server over Cap'n Proto (in-process or over TCP).
#pragma once

#include <kj/async.h>

#include <string>
#include <vector>

#include "common/engine/chunk_plan.h"
#include "common/rpc/proto/pstrain.capnp.h"
#include "common/rpc/rpc_util.h"

namespace pstrain::testing {

// Sets the job up on `server` the way the coordinator does: the whole chunk table, the server as
// index 0 (so it holds the chunks placed there).
inline void configure_job(proto::ParameterServer::Client& server, kj::WaitScope& ws, const std::string& job_id,
                          const std::string& spec_json, const std::vector<ChunkInfo>& chunks, uint32_t workers,
                          const std::string& worker_key = "") {
  auto request = server.configureRequest();
  auto config = request.initConfig();
  config.setJobId(job_id);
  config.setSpecJson(spec_json);
  rpc::set_chunks(config.initChunks(static_cast<unsigned>(chunks.size())), chunks);
  config.setServerIndex(0);
  config.setWorkers(workers);
  config.setWorkerKey(capnp::Data::Reader(reinterpret_cast<const kj::byte*>(worker_key.data()), worker_key.size()));
  request.send().wait(ws);
}

}  // namespace pstrain::testing
