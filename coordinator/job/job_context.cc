#include "coordinator/job/job_context.h"

#include <algorithm>

#include "common/data/model_inputs.h"

namespace pstrain {

const char* job_phase_name(JobPhase phase) {
  switch (phase) {
    case JobPhase::kPending: return "pending";
    case JobPhase::kConfiguring: return "configuring";
    case JobPhase::kRunning: return "running";
    case JobPhase::kCutting: return "cutting";
    case JobPhase::kTakingOver: return "taking over";
    case JobPhase::kRecovering: return "recovering";
    case JobPhase::kSucceeded: return "succeeded";
    case JobPhase::kFailed: return "failed";
    case JobPhase::kCancelled: return "cancelled";
  }
  return "?";
}

std::vector<uint32_t> node_numbers(const std::vector<NodeId>& nodes) {
  std::vector<uint32_t> out;
  for (NodeId n : nodes) out.push_back(n.value());
  return out;
}

JobState job_state(JobPhase phase) {
  switch (phase) {
    case JobPhase::kPending: return JobState::kPending;
    case JobPhase::kConfiguring:
    case JobPhase::kRunning:
    case JobPhase::kCutting:
    case JobPhase::kTakingOver: return JobState::kRunning;
    case JobPhase::kRecovering: return JobState::kRecovering;
    case JobPhase::kSucceeded: return JobState::kSucceeded;
    case JobPhase::kFailed: return JobState::kFailed;
    case JobPhase::kCancelled: return JobState::kCancelled;
  }
  return JobState::kFailed;
}

JobContext::JobContext(std::string id_, JobSpec spec_, Cluster& cluster_, DataService& data_, JobStore& store_,
                       kj::AsyncIoProvider& io_, JobOptions options_)
    : id(std::move(id_)),
      spec(std::move(spec_)),
      spec_json(job_spec_to_json(spec)),
      layout(make_param_layout(spec.model)),
      cluster(cluster_),
      data(data_),
      store(store_),
      io(io_),
      options(options_),
      servers(id, io_, options),
      progress(id, static_cast<uint32_t>(spec.training.epochs), store_) {}

DataRecipe JobContext::data_recipe() const {
  return {spec.dataset.name, spec.training.validation_fraction, spec.dataset.shuffle_seed,
          spec.training.class_weight, spec.loss, spec.preprocessing};
}

void JobContext::take_data(const JobData& data) {
  prepared = data;
  if (!data.class_weights) return;
  spec.training.class_weight = ClassWeightSpec{ClassWeightSpec::Kind::kList, {}, *data.class_weights};
  spec.loss.class_weights = *data.class_weights;
  spec_json = job_spec_to_json(spec);
}

std::optional<size_t> JobContext::worker_index(NodeId node) const {
  for (size_t i = 0; i < workers.size(); ++i) {
    if (workers[i] == node) return i;
  }
  return std::nullopt;
}

uint32_t JobContext::slices() const {
  if (!sync()) return static_cast<uint32_t>(workers.size());
  return std::max(static_cast<uint32_t>(spec.training.workers), static_cast<uint32_t>(workers.size()));
}

std::vector<uint32_t> JobContext::slices_of(size_t index) const {
  std::vector<uint32_t> out{static_cast<uint32_t>(index)};
  const size_t n = workers.size();
  for (size_t s = n; s < slices(); ++s) {
    if ((s - n) % n == index) out.push_back(static_cast<uint32_t>(s));
  }
  return out;
}

bool JobContext::alive(NodeId node) const {
  const NodeInfo* n = cluster.find(node);
  return n != nullptr && n->alive;
}

bool WorkerWatches::waiting(NodeId node) {
  const auto it = open_.find(node);
  return it != open_.end() && it->second->isWaiting();
}

void WorkerWatches::order(NodeId node, WorkerOrder order) {
  const auto it = open_.find(node);
  KJ_REQUIRE(it != open_.end(), "no open watch call to order", node);
  it->second->fulfill(kj::mv(order));
  open_.erase(it);
}

void JobContext::fill_server_config(proto::JobConfig::Builder config) const {
  config.setJobId(id);
  config.setSpecJson(spec_json);
  rpc::set_chunks(config.initChunks(static_cast<unsigned>(chunks.size())), chunks);
  config.setWorkers(slices());  // the pushes a sync step waits for: one per slice
  config.setStepsPerEpoch(steps_per_epoch());
  config.setMinGeneration(generation);
  if (!options.coordinator_key.empty()) {
    const std::string key = rpc::job_key(options.coordinator_key, id);
    config.setWorkerKey(capnp::Data::Reader(reinterpret_cast<const kj::byte*>(key.data()), key.size()));
  }
}

Metadata JobContext::model_file_metadata(int64_t epoch, uint64_t step) const {
  Metadata m = {{"format", "pstrain"},
          {"job", id},
          {"name", spec.name},
          {"spec", job_spec_to_json(spec)},
          {"dataset", spec.dataset.name},
          {"dataset_examples", std::to_string(prepared.train->size)},
          {std::string(kInputDtypeKey), std::string(dtype_name(prepared.train->dtype))},
          {"epoch", std::to_string(epoch)},
          {"step", std::to_string(step)}};
  if (prepared.preprocessing) m.emplace_back("preprocessing", fitted_to_json(*prepared.preprocessing));
  if (!prepared.preprocessing && !prepared.train->class_names.empty()) m.emplace_back(std::string(kClassNamesKey), class_names_json(prepared.train->class_names));
  return m;
}

uint64_t JobContext::total_steps() const {
  uint64_t per_epoch = 0;
  if (sync()) {
    per_epoch = steps_per_epoch();
  } else {
    for (uint32_t w = 0; w < workers.size(); ++w) per_epoch += static_cast<uint64_t>(plan->steps_per_epoch(w));
  }
  return per_epoch * static_cast<uint64_t>(spec.training.epochs);
}

void WorkerWatches::end_all(const std::string& why) {
  auto open = kj::mv(open_);
  open_.clear();
  for (auto& [node, fulfiller] : open) {
    if (fulfiller->isWaiting()) fulfiller->reject(KJ_EXCEPTION(FAILED, "re-planned: get a new assignment", why));
  }
}

}  // namespace pstrain
