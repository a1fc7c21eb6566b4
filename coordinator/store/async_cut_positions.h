// Async jobs' worker positions at their consistent cuts (job/<id>/cut/<version>, by the cut's
// backup version): where a restarted coordinator resumes the workers (DESIGN-NOTES "Async state
// across a coordinator restart"). JobStore keeps them in JobRecord::async_cuts and calls this
// class for their writes.
//
// Thread rules: called under JobStore's lock; the promise resolves on the caller's event loop.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <kj/async.h>

#include "coordinator/store/kv_writer.h"
#include "coordinator/store/worker_position.h"

namespace pstrain {

class AsyncCutPositions {
 public:
  using Cuts = std::map<uint64_t, std::vector<WorkerPosition>>;

  explicit AsyncCutPositions(KvWriter& writer) : writer_(writer) {}

  // Puts `positions` at `version` into `cuts`, takes the `dropped` versions out, and queues
  // both; resolves once written: the caller asks the servers to back up only then, so after a
  // kill of the process every backup of a cut has its positions on disk.
  kj::Promise<void> set(const std::string& job, Cuts& cuts, uint64_t version, std::vector<WorkerPosition> positions,
                        const std::vector<uint64_t>& dropped);
  // Empties `cuts` and queues the deletion of every stored one.
  void erase_all(const std::string& job, Cuts& cuts);
  // The version of a key's kind ("cut/<version>" after "job/<id>/"), or nullopt.
  static std::optional<uint64_t> version_of(const std::string& kind);

 private:
  KvWriter& writer_;
};

}  // namespace pstrain
