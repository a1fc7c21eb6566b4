// The ParameterServer RPC interface over ParameterShards, one per job.
//
// Every request is validated here (unknown job or key, wrong dtype or size, bad slice) and a bad
// one fails only its own call, with a message naming what is wrong: the server keeps serving.
//
// Storage: every RocksDB access (backup writes, restore's read, adoptBackup's write, the listing
// of backups, the deletion of an abandoned timeline's backups) is a task on the StoreThread, in
// call order; the call completes when its task has. The shards change only on this thread, after
// the read they depend on: a restore whose job was dropped, replaced, restored again or fenced
// off by a newer plan while its backup was being read fails instead of applying.
//
// Thread rules: event-loop thread only.
// Ownership: owns the jobs' shards; borrows the StoreThread, which must outlive this.
#pragma once

#include <atomic>

#include <chrono>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <unordered_map>
#include <vector>
#include <string>

#include "common/rpc/proto/pstrain.capnp.h"
#include "server/store_thread.h"
#include "server/parameter_shard.h"

namespace pstrain {

class ParameterServerImpl final : public proto::ParameterServer::Server {
 public:
  // `store` may be null (no backups: a server without a data directory, or tests).
  explicit ParameterServerImpl(StoreThread* store) : store_(store) {}

  size_t job_count() const { return jobs_.size(); }
  // Pushes taken in (of any kind), the progress counter of this node's heartbeats: a server whose
  // loop is stuck stops taking any. Read from the heartbeat thread.
  const std::atomic<uint64_t>& progress() const { return progress_; }
  // The store thread has made the job's backup at `version` durable (or failed to): training may go on
  // past the next backup point.
  void backup_written(const std::string& job_id, uint64_t version);

 protected:
  kj::Promise<void> configure(ConfigureContext context) override;
  kj::Promise<void> pull(PullContext context) override;
  kj::Promise<void> push(PushContext context) override;
  kj::Promise<void> pushBatch(PushBatchContext context) override;
  kj::Promise<void> pullRows(PullRowsContext context) override;
  kj::Promise<void> pushFactors(PushFactorsContext context) override;
  kj::Promise<void> workerFinished(WorkerFinishedContext context) override;
  kj::Promise<void> putState(PutStateContext context) override;
  kj::Promise<void> dropJob(DropJobContext context) override;
  kj::Promise<void> stats(StatsContext context) override;
  kj::Promise<void> restore(RestoreContext context) override;
  kj::Promise<void> backups(BackupsContext context) override;
  kj::Promise<void> backupAt(BackupAtContext context) override;
  kj::Promise<void> versions(VersionsContext context) override;
  kj::Promise<void> settle(SettleContext context) override;
  kj::Promise<void> backupNow(BackupNowContext context) override;
  kj::Promise<void> releaseHold(ReleaseHoldContext context) override;
  kj::Promise<void> adoptBackup(AdoptBackupContext context) override;

 private:
  std::atomic<uint64_t> progress_{0};
  struct Job {
    std::unique_ptr<ParameterShard> shard;
    uint64_t bytes_in = 0, bytes_out = 0;
    std::set<uint64_t> extra_backup_points;  // asked for by backupAt
    bool dropped = false;                     // retired: calls still waiting on it fail
    uint64_t restores = 0;                    // restore calls so far (the newest one wins)
    std::string worker_key;                   // JobConfig.workerKey: empty, no token checks
    // Tokens of the nodes that have presented a valid one (only those: its size is bounded by the
    // job's workers, whatever others send), so a call costs a comparison, not an HMAC.
    std::unordered_map<uint32_t, std::string> worker_tokens;
  };
  // Fails the call (KJ_REQUIRE) unless `token` is the worker token of `node` for the job (when
  // the job has a worker key): only workers the coordinator assigned to the job hold one.
  void check_worker(Job& job, capnp::Text::Reader job_id, uint32_t node, capnp::Data::Reader token);
  uint64_t refused_calls_ = 0;
  Job& find(capnp::Text::Reader job_id);
  // Deletes the job's backups after `version` (on the store thread); resolves when that is done.
  kj::Promise<void> forget_backups_after(const std::string& job_id, uint64_t version);
  ParameterShard& shard_with_key(Job& job, capnp::Text::Reader job_id, uint32_t key);
  // Resolves once chunk `key` of the job's `shard` is at `min_version` or later (pull, pullRows),
  // with the job; fails if the job was dropped meanwhile. `clip_factor`: ParameterShard::pull's.
  kj::Promise<std::shared_ptr<Job>> when_at_version(ParameterShard& shard, const std::string& job_id, uint32_t key,
                                                    uint64_t min_version,
                                                    std::optional<float> clip_factor = std::nullopt);
  // Reads a push's common fields (step, slice, worker, ...) into `request`, checked.
  template <typename Params>
  static void read_push_header(const Params& params, PushRequest& request);

  // One push (PushParams), read and checked: what its shard applies, and how its reply is made.
  // Its gradient points into the call's message or into `decoded`, which the call keeps alive.
  struct CheckedPush {
    std::string job_id;
    PushRequest request;
    std::shared_ptr<std::vector<float>> decoded;       // a compressed gradient as float32
    std::shared_ptr<std::vector<float>> worker_state;  // PushParams.workerState, copied out
    std::optional<std::vector<ChunkRange>> reply_ranges;  // none: the whole chunk
    std::shared_ptr<std::vector<uint32_t>> rows;          // a table piece's gradient rows, copied out
    std::vector<uint32_t> reply_rows;                     // a table piece's reply rows
    bool reply_half = false;
    bool reply_bf16 = false;  // PushParams.replyBfloat16
    uint64_t bytes_in = 0;  // payload bytes, counted when the push is applied
  };
  // Checks everything a push can get wrong (job, token, key, gradient, state, reply) and changes
  // nothing: fails (KJ_REQUIRE) naming what is wrong.
  CheckedPush check_push(proto::ParameterServer::PushParams::Reader params);
  // The same for a push that names a sparse table piece or its rows (table_rows_rpc.cc): the
  // rows and their gradients copied out, the reply's rows checked.
  static void check_table_push(const ShardChunk& chunk, proto::ParameterServer::PushParams::Reader params,
                               CheckedPush& push);
  // Hands a checked push to its shard; once it has applied, fills the PushResults that
  // `results_of()` returns (called then, not before).
  template <typename ResultsOf>
  kj::Promise<void> apply_push(CheckedPush push, ResultsOf results_of);

  // Forward on the servers: puts the partial product of `rows` (the call's next.forward.rows) for
  // the call's next.forward.inputs into its reply (an empty one without rows).
  static void reply_partial_product(Job& job, const std::vector<uint32_t>& keys, const std::vector<uint32_t>& rows,
                             uint32_t examples, PushFactorsContext& context);

  // A dropped or replaced job's shard is freed only after a minute, at the next push, drop or
  // configure: replies still being written may point into its buffers (zero-copy).
  void retire(std::shared_ptr<Job> job);
  void prune_retired();

  // The largest partial product a pushFactors may ask for (well under Cap'n Proto's 64 MiB
  // message limit).
  static constexpr size_t kMaxPartialBytes = size_t{32} << 20;
  StoreThread* store_;
  std::map<std::string, std::shared_ptr<Job>> jobs_;
  std::vector<std::pair<std::chrono::steady_clock::time_point, std::shared_ptr<Job>>> retired_;
};

}  // namespace pstrain
