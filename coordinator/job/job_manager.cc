#include "coordinator/job/job_manager.h"

#include <algorithm>
#include <set>

namespace pstrain {

JobManager::JobManager(Cluster& cluster, DataService& data, JobStore& store, kj::AsyncIoProvider& io,
                       JobOptions options)
    : cluster_(cluster), data_(data), store_(store), io_(io), options_(options) {}

std::string JobManager::submit(JobSpec spec, std::string id, JobOrigin origin) {
  if (id.empty()) {
    // Ids never repeat, also across restarts: skip any the store already knows.
    do {
      id = "job-" + std::to_string(next_id_++);
    } while (store_.get(id).has_value());
  }
  jobs_.push_back(std::make_unique<JobRunner>(id, std::move(spec), cluster_, data_, store_, io_, options_,
                                                 [this](JobRunner& job) {
    if (on_finished_) on_finished_(job);
  }, std::move(origin)));
  return id;
}

bool JobManager::schedule() {
  // The servers re-queued jobs wait for after a restart (their backups are there): no other job
  // takes them meanwhile (Adoption).
  std::set<std::string> awaited;
  for (auto& job : jobs_) {
    for (std::string& name : job->faults().adoption().awaited_servers()) awaited.insert(std::move(name));
  }
  bool started = false;
  for (auto& job : jobs_) {
    if (job->state() == JobState::kPending && job->try_start(awaited)) started = true;
  }
  return started;
}

JobRunner* JobManager::find(const std::string& id) {
  for (auto& job : jobs_) {
    if (job->id() == id) return job.get();
  }
  return nullptr;
}

JobRunner* JobManager::job_of_worker(NodeId node) {
  NodeInfo* info = cluster_.find(node);
  if (info == nullptr || info->job.empty()) return nullptr;
  return find(info->job);
}

void JobManager::on_server_registered(NodeId node) {
  for (auto& job : jobs_) job->faults().on_server_registered(node);
}

void JobManager::note(const std::string& text, std::optional<NodeId> node) {
  for (const auto& job : jobs_) {
    if (is_finished(job->state())) continue;
    if (node) {
      const auto users = jobs_using(*node);
      if (std::find(users.begin(), users.end(), job.get()) == users.end()) continue;
    }
    store_.update(job->id(), [&](JobRecord& r) { r.notes.push_back(text); });
  }
}

}  // namespace pstrain

namespace pstrain {

std::vector<JobRunner*> JobManager::jobs_using(NodeId node) {
  std::vector<JobRunner*> out;
  for (auto& job : jobs_) {
    const JobState s = job->state();
    if ((s == JobState::kRunning || s == JobState::kRecovering) && job->faults().uses_node(node)) out.push_back(job.get());
  }
  return out;
}

void JobManager::on_nodes_lost(const std::vector<NodeId>& nodes, const std::string& why) {
  for (NodeId node : nodes) {
    for (JobRunner* job : jobs_using(node)) job->faults().on_node_lost(node, "node " + std::to_string(node.value()) + " " + why);
  }
}

}  // namespace pstrain
