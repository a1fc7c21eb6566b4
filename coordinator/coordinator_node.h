// The coordinator as pstrain-coordinator runs it, less the REST API and the --job job: the job
// store on its RocksDB directory, the dataset catalog, cluster membership, the data service, the jobs (unfinished ones
// re-queued from the store after a restart), the studies (study/study_manager.h), the Coordinator RPC service on a listening socket,
// and the housekeeping that declares silent nodes dead, starts queued jobs and lets running ones
// take free workers. coordinator_main.cc adds the HTTP server and the --job job; tests run it on
// a thread of its own (tests/coordinator/inprocess_cluster.h).
//
// Thread rules: event-loop thread only: construct, use and destroy it on the thread whose event
// loop `io` is. store() may be read from any thread (JobStore is thread-safe).
// Ownership: owns every part above (and a copy of the config, the split loader included);
// borrows `io`, which must outlive it.
#pragma once

#include <chrono>

#include <capnp/rpc-twoparty.h>
#include <kj/async-io.h>

#include <cstdint>
#include <memory>
#include <string>

#include "common/storage/kv_store.h"
#include "common/rpc/rpc_util.h"
#include "coordinator/cluster/cluster.h"
#include "coordinator/coordinator_service.h"
#include "coordinator/datasets/data_service.h"
#include "coordinator/datasets/dataset_catalog.h"
#include "coordinator/job/job_options.h"
#include "coordinator/job/job_manager.h"
#include "coordinator/store/job_store.h"
#include "coordinator/study/study_manager.h"
#include "coordinator/study/study_store.h"

namespace pstrain {

struct CoordinatorNodeConfig {
  rpc::HostPort listen;   // port 0: any free port
  std::string data_dir;   // the datasets: built-in IDX files and dataset directories (uploads)
  std::string datasets_dir;  // where uploaded datasets are stored ("": data_dir)
  uint64_t max_upload_bytes = uint64_t{4} << 30;  // one dataset upload
  uint64_t shard_max_examples = uint64_t{1} << 20;  // per shard file of an uploaded split (ShardLimits)
  // Where the DataService gets splits (called on its loading thread). Empty: the dataset
  // catalog's (tests give their own, e.g. synthetic data).
  SplitLoader load_split;
  std::string state_dir;  // RocksDB: jobs, metrics, models (created if missing)
  uint32_t heartbeat_ms = 1000;   // how often nodes heartbeat
  uint32_t dead_after_ms = 5000;  // a node silent this long is declared dead
  JobOptions job;                 // every timeout of the jobs
  // Proved by every RPC connection, both ways (open: none). With one, the coordinator keeps a key
  // of its own for worker tokens in state_dir/worker-token.key.
  rpc::ClusterCredential cluster;
  kj::Duration housekeeping_every = 200 * kj::MILLISECONDS;
  // A gap between two housekeeping runs longer than this means the coordinator itself was
  // stalled (stopped, paused, starved): every node gets a fresh dead_after_ms before anything is
  // declared dead (DESIGN-NOTES "Liveness").
  std::chrono::milliseconds loop_stall_after{2000};
  // A node in a job is reported stalled when its progress has not advanced for
  // max(stall_min_quiet, stall_factor x its recent time per unit of progress).
  std::chrono::milliseconds stall_min_quiet{60000};
  double stall_factor = 20;
};

class CoordinatorNode {
 public:
  // Opens the state directory (throws pstrain::Error saying why if it cannot), re-queues every
  // unfinished job it holds, listens, and starts the housekeeping.
  CoordinatorNode(kj::AsyncIoContext& io, const CoordinatorNodeConfig& config);
  ~CoordinatorNode();
  CoordinatorNode(const CoordinatorNode&) = delete;
  CoordinatorNode& operator=(const CoordinatorNode&) = delete;

  uint32_t port() const { return port_; }
  // Cluster connections refused at their handshake (thread-safe counter).
  const rpc::AuthRefusals& auth_refusals() const { return refusals_; }
  JobStore& store() { return store_; }
  JobManager& jobs() { return jobs_; }
  // Thread-safe (the REST API reads it from the HTTP thread).
  StudyStore& study_store() { return study_store_; }
  StudyManager& studies() { return studies_; }
  // Thread-safe (the REST API uses it from the HTTP thread).
  DatasetCatalog& catalog() { return catalog_; }
  const Cluster& cluster() const { return cluster_; }
  // Starts the queued jobs the cluster has room for, and wakes the workers waiting for an
  // assignment if any did.
  void schedule();

 private:
  kj::Promise<void> housekeeping();

  kj::AsyncIoProvider& io_;
  CoordinatorNodeConfig config_;
  std::unique_ptr<KvStore> kv_;
  JobStore store_;
  DatasetCatalog catalog_;
  Cluster cluster_;
  DataService data_;
  JobManager jobs_;
  StudyStore study_store_;
  StudyManager studies_;
  CoordinatorService* service_ = nullptr;  // owned by rpc_server_
  kj::Own<capnp::TwoPartyServer> rpc_server_;
  kj::Own<kj::ConnectionReceiver> listener_;
  rpc::AuthRefusals refusals_;
  kj::Own<rpc::ListenerAuth> listener_auth_;
  uint32_t port_ = 0;
  kj::Promise<void> serving_ = nullptr;
  kj::Promise<void> housekeeping_ = nullptr;
  std::chrono::steady_clock::time_point last_housekeeping_ = std::chrono::steady_clock::now();
  // Reports the coordinator's own stall, if the last housekeeping run is long past (grace first).
  void check_own_stall();
  // Notes on their jobs for nodes that stalled or advance again.
  void report_stalls();
};

}  // namespace pstrain
