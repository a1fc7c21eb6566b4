#include "coordinator/coordinator_node.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <limits>
#include <set>

#include "common/base/error.h"
#include "common/data/job_spec.h"
#include "common/base/log.h"
#include "coordinator/store/job_json.h"

namespace pstrain {
namespace {

std::unique_ptr<KvStore> open_state(const std::string& dir) {
  std::string error;
  std::unique_ptr<KvStore> kv = KvStore::open(dir, &error);
  if (!kv) throw Error(error);
  return kv;
}

// The jobs' options with the cluster's credential and, with one, the coordinator's worker-token
// key (kept in the state directory, so a restarted coordinator issues the same tokens to the
// servers it adopts).
JobOptions job_options(const CoordinatorNodeConfig& config) {
  JobOptions options = config.job;
  options.cluster = config.cluster;
  if (!config.cluster.open()) options.coordinator_key = rpc::load_or_create_key_file(config.state_dir + "/worker-token.key");
  return options;
}

std::vector<NodeView> node_views(const Cluster& cluster) {
  using namespace std::chrono;
  const auto steady_now = steady_clock::now();
  const int64_t wall_now = now_ms();
  auto wall = [&](steady_clock::time_point t) {
    return wall_now - duration_cast<milliseconds>(steady_now - t).count();
  };
  std::vector<NodeView> views;
  for (const auto& [id, node] : cluster.nodes()) {
    views.push_back({id.value(), node.role == proto::Role::SERVER ? "server" : "worker", node.name, node.address, node.job,
                     wall(node.registered_at), wall(node.last_heartbeat), node.alive, node.cpu, node.progress,
                     node.stalled});
  }
  return views;
}

}  // namespace

namespace {

// What one split may hold as the catalog converts it into shards: no longer what fits in memory
// (ExampleLimits' defaults, 2 GiB and 10M rows) but what the upload cap allows, with room for a
// compressed upload (a gzip'd IDX file) to expand 4 times, and at most 2^32 - 1 examples (a
// split's ids are 32 bits; its labels, 4 bytes an example, are what the catalog and a job hold).
ExampleLimits stored_split_limits(uint64_t max_upload_bytes) {
  ExampleLimits limits;
  if (max_upload_bytes <= (uint64_t{1} << 60)) limits.max_bytes = std::max(limits.max_bytes, 4 * max_upload_bytes);
  limits.max_examples = std::numeric_limits<uint32_t>::max();
  return limits;
}

}  // namespace

CoordinatorNode::CoordinatorNode(kj::AsyncIoContext& io, const CoordinatorNodeConfig& config)
    : io_(*io.provider),
      config_(config),
      kv_(open_state(config.state_dir)),
      store_(*kv_),
      catalog_(DatasetCatalog::Options{config.data_dir, config.datasets_dir, config.max_upload_bytes,
                                       stored_split_limits(config.max_upload_bytes),
                                                      ShardLimits{.max_examples = config.shard_max_examples}}, *kv_,
               [this](const std::string& dataset) { return jobs_using_dataset(store_.list(), dataset); }),
      cluster_(std::chrono::milliseconds(config.dead_after_ms)),
      data_(config.load_split ? config.load_split
                              : SplitLoader([this](const std::string& name, SplitKind kind) { return catalog_.load(name, kind); }),
            [this](const std::string& name) { return catalog_.generation(name); }),
      jobs_(cluster_, data_, store_, io_, job_options(config)),
      study_store_(*kv_),
      studies_(jobs_, store_, study_store_) {
  rpc::warn_if_open(config.cluster, "coordinator");
  // Node events name the node (the store calls this on this thread, from its writes).
  store_.set_node_lookup([this](uint32_t id) -> std::optional<NodeView> {
    const NodeInfo* node = cluster_.find(NodeId{id});
    if (node == nullptr) return std::nullopt;
    NodeView view;
    view.id = id;
    view.role = node->role == proto::Role::SERVER ? "server" : "worker";
    view.name = node->name;
    return view;
  });
  // Jobs from before a restart: finished ones stay listed; unfinished ones run again, and keep
  // the replicas of their servers' backups (Adoption); other jobs' replicas are deleted.
  std::set<std::string> requeued;
  for (const JobRecord& record : store_.load()) {
    if (record.finished()) continue;
    try {
      requeued.insert(record.id);
      jobs_.submit(parse_job_spec(record.spec_json), record.id);
      PSLOG(kInfo) << "job " << record.id << " re-queued after a restart";
    } catch (const SpecError& e) {
      store_.update(record.id, [&](JobRecord& r) {
        r.state = JobState::kFailed;
        r.reason = std::string("stored spec no longer valid: ") + e.what();
      });
    }
  }
  store_.replicas().keep_only(requeued);
  // Studies go on with the jobs re-queued above (and adopt any trial job their record missed).
  studies_.load();
  auto service = kj::heap<CoordinatorService>(cluster_, jobs_, io_.getTimer(), config.heartbeat_ms, config.dead_after_ms);
  service_ = service.get();
  rpc_server_ = kj::heap<capnp::TwoPartyServer>(kj::mv(service));
  auto address = io_.getNetwork().parseAddress(config.listen.host, config.listen.port).wait(io.waitScope);
  listener_ = address->listen();
  port_ = listener_->getPort();
  listener_auth_ = kj::heap<rpc::ListenerAuth>(rpc::ListenerAuth{config_.cluster, io_.getTimer(), refusals_, "coordinator"});
  serving_ = rpc::serve(*rpc_server_, *listener_, *listener_auth_).eagerlyEvaluate([](kj::Exception&& e) {
    PSLOG(kError) << "listener failed: " << e.getDescription().cStr();
  });
  PSLOG(kInfo) << "serving coordinator RPC on " << config.listen.host << ":" << port_ << ", datasets from "
               << config.data_dir;
  housekeeping_ = housekeeping().eagerlyEvaluate([](kj::Exception&& e) { PSLOG(kError) << e.getDescription().cStr(); });
}

CoordinatorNode::~CoordinatorNode() = default;

void CoordinatorNode::schedule() {
  if (jobs_.schedule()) service_->wake_waiting_workers();
}

void CoordinatorNode::check_own_stall() {
  const auto now = std::chrono::steady_clock::now();
  const auto gap = now - last_housekeeping_;
  last_housekeeping_ = now;
  if (gap <= config_.loop_stall_after) return;
  const double seconds = std::chrono::duration<double>(gap).count();
  char text[200];
  std::snprintf(text, sizeof text,
                "the coordinator was stalled for %.1f s (stopped, paused or starved): every node gets a fresh "
                "%.1f s before any is declared dead",
                seconds, config_.dead_after_ms / 1000.0);
  PSLOG(kWarning) << text;
  cluster_.grace();
  jobs_.note(text);
}

void CoordinatorNode::report_stalls() {
  for (const StallChange& c : cluster_.stall_changes(config_.stall_min_quiet, config_.stall_factor)) {
    const NodeInfo* node = cluster_.find(c.id);
    if (node == nullptr) continue;
    const std::string who = "node " + std::to_string(c.id.value()) + " (" +
                            (node->role == proto::Role::SERVER ? "server" : "worker") + " '" + node->name + "')";
    char text[300];
    if (c.stalled) {
      std::snprintf(text, sizeof text,
                    "%s is alive but has made no progress for %.0f s (its recent work took %.2f s per unit): it "
                    "may be stuck",
                    who.c_str(), c.quiet_seconds, c.unit_seconds);
      PSLOG(kWarning) << text;
    } else {
      if (!node->alive || node->job.empty()) continue;
      std::snprintf(text, sizeof text, "%s makes progress again", who.c_str());
      PSLOG(kInfo) << text;
    }
    jobs_.note(text, c.id);
  }
}

kj::Promise<void> CoordinatorNode::housekeeping() {
  return io_.getTimer().afterDelay(config_.housekeeping_every).then([this] {
    check_own_stall();
    jobs_.on_nodes_lost(cluster_.expire(), "missed its heartbeats");
    report_stalls();
    store_.set_nodes(node_views(cluster_));
    studies_.tick();  // a study's next trials join the queue before it is scheduled
    schedule();
    // Queued jobs first; then running jobs short of workers take the free ones.
    for (const auto& job : jobs_.jobs()) job->faults().grow();
    for (const auto& job : jobs_.jobs()) {
      if (job->ready_for_workers()) service_->wake_waiting_workers();
    }
    return housekeeping();
  });
}

}  // namespace pstrain
