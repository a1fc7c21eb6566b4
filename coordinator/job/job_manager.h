// The coordinator's jobs: submitted specs, queued until the cluster can run them, in order.
//
// Thread rules: event-loop thread only.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "coordinator/job/job_runner.h"

namespace pstrain {

class JobManager {
 public:
  JobManager(Cluster& cluster, DataService& data, JobStore& store, kj::AsyncIoProvider& io,
             JobOptions options = {});

  // Queues a job; returns its id. The spec must be valid (parse_job_spec checked it). `id` is
  // given when a restarted coordinator re-queues a job it had, or for a study's trial (`origin`).
  std::string submit(JobSpec spec, std::string id = "", JobOrigin origin = {});
  // Starts every queued job the cluster has room for (in submission order; a re-queued job's
  // recorded servers are kept for it while it waits for them); true if any started.
  bool schedule();
  JobRunner* find(const std::string& id);
  JobRunner* job_of_worker(NodeId node);
  // Every unfinished job that uses the node (as server or worker).
  std::vector<JobRunner*> jobs_using(NodeId node);
  // Nodes declared dead: their jobs recover (or fail, saying why).
  void on_nodes_lost(const std::vector<NodeId>& nodes, const std::string& why);
  // A note (a "note" event) on every unfinished job that uses the node; with no node, on every
  // unfinished job.
  void note(const std::string& text, std::optional<NodeId> node = std::nullopt);
  // A server registered: every job (running or ended) fences it if it is one the job's shard
  // moved away from (JobRunner::on_server_registered). Call before schedule().
  void on_server_registered(NodeId node);
  const std::vector<std::unique_ptr<JobRunner>>& jobs() const { return jobs_; }

  // Called whenever a job ends (SUCCEEDED, FAILED, CANCELLED).
  void on_job_finished(std::function<void(JobRunner&)> callback) { on_finished_ = std::move(callback); }

 private:
  Cluster& cluster_;
  DataService& data_;
  JobStore& store_;
  kj::AsyncIoProvider& io_;
  JobOptions options_;
  std::vector<std::unique_ptr<JobRunner>> jobs_;
  std::function<void(JobRunner&)> on_finished_;
  uint64_t next_id_ = 1;
};

}  // namespace pstrain
