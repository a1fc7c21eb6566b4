#include "worker/training_session.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>

#include "common/error.h"
#include "common/log.h"
#include "worker/batch_decode.h"
#include "worker/first_layer_groups.h"
#include "worker/shard_reader.h"

namespace pstrain {
namespace {

using Clock = std::chrono::steady_clock;

}  // namespace

TrainingSession::TrainingSession(kj::AsyncIoProvider& io, kj::WaitScope& wait_scope,
                                 proto::Coordinator::Client coordinator, uint32_t node_id,
                                 proto::Assignment::Reader a, SessionOptions options, kj::ForkedPromise<void>& stop)
    : io_(io),
      wait_scope_(wait_scope),
      stop_(stop),
      coordinator_(kj::mv(coordinator)),
      node_id_(node_id),
      job_id_(rpc::to_string(a.getJobId())),
      spec_(parse_job_spec(rpc::to_string(a.getSpecJson()))),
      worker_index_(a.getWorkerIndex()),
      worker_count_(a.getWorkerCount()),
      steps_per_epoch_(a.getStepsPerEpoch()),
      start_epoch_(a.getStartEpoch()),
      start_step_(a.getStartStep()),
      chunks_(rpc::get_chunks(a.getChunks())),
      sparsity_(spec_.model, make_param_layout(spec_.model), chunks_),
      sparse_exchange_(options.exchange != Exchange::kDense && sparsity_.active()),
      factor_plan_(make_param_layout(spec_.model), chunks_,
                   (spec_.training.global_batch_size + worker_count_ - 1) / worker_count_,
                   options.exchange >= Exchange::kFactored && options.replicas == 1),
      generation_(a.getGeneration()) {
  for (auto s : a.getServers()) server_addresses_.push_back(rpc::to_string(s));
  const int64_t batch = (spec_.training.global_batch_size + worker_count_ - 1) / worker_count_;
  model_ = std::make_unique<nn::DataParallelModel<float>>(spec_.model, batch, options.replicas);
  KJ_REQUIRE(factor_plan_.groups().empty() || model_->replicas() == 1, "factored pushes need one compute replica");
  const ParamLayout& layout = model_->layout();
  for (const ChunkInfo& c : chunks_) {
    KJ_REQUIRE(c.param < layout.params().size() && c.offset + c.size <= layout.params()[c.param].size &&
                   c.server < server_addresses_.size(),
               "assignment has a chunk that does not fit the model", c.key);
    chunk_offsets_.push_back(layout.params()[c.param].offset + c.offset);
  }
  versions_.assign(chunks_.size(), 0);
  // Every worker computes the first layer per server's rows, whether or not the servers do it
  // (the same sums either way, and what the trainer's `servers` option reproduces).
  if (group_first_layer_by_server(*model_, chunks_, static_cast<uint32_t>(server_addresses_.size()))) {
    first_kernel_ = model_->first_replica().first_layer_kernel();
  }
  if (options.exchange == Exchange::kForward && sparse_exchange_ && first_kernel_ >= 0 &&
      std::any_of(factor_plan_.groups().begin(), factor_plan_.groups().end(),
                  [&](const FactorPlan::Group& g) { return static_cast<int>(g.param) == first_kernel_; })) {
    forward_.emplace(server_addresses_.size(), factor_plan_.groups().size(),
                     static_cast<size_t>(model_->input_size()), static_cast<size_t>(batch));
  }
  // A session that resumes (after a recovery) counts the job's steps from where it starts, so
  // progress reports do not go backwards.
  steps_done_ = start_epoch_ * steps_per_epoch_ + start_step_;
  for (size_t k = 0; k < chunks_.size(); ++k) {
    if (!factor_plan_.is_factored_chunk(k)) push_order_.push_back(k);
  }
  std::sort(push_order_.begin(), push_order_.end(),
            [this](size_t a, size_t b) { return chunk_offsets_[a] > chunk_offsets_[b]; });
  const auto& groups = factor_plan_.groups();
  for (size_t g = 0; g < groups.size(); ++g) group_order_.push_back(g);
  std::stable_sort(group_order_.begin(), group_order_.end(),
                   [&](size_t a, size_t b) { return groups[a].param_offset > groups[b].param_offset; });
  group_buffers_.resize(groups.size());
  factor_deltas_.resize(layout.params().size());
  deltas_round_.assign(layout.params().size(), 0);
  params_.resize(layout.total_size());
  next_params_.resize(layout.total_size());
  grads_.resize(layout.total_size());
  inputs_.resize(static_cast<size_t>(model_->input_size() * batch));
  labels_.resize(static_cast<size_t>(batch));
  push_ranges_.assign(chunks_.size(), std::nullopt);
  reply_ranges_.assign(chunks_.size(), std::nullopt);
  PSLOG(kInfo) << "job " << job_id_ << ": worker " << worker_index_ << " of " << worker_count_ << ", "
               << steps_per_epoch_ << " steps per epoch, batch " << batch << ", " << chunks_.size() << " chunks on "
               << server_addresses_.size() << " server(s)"
               << (sparse_exchange_ ? ", row-sparse exchange of the first layer" : "")
               << (groups.empty() ? "" : ", " + std::to_string(groups.size()) + " factored kernel pushes per step")
               << (forward_ ? ", the first layer's forward on the servers" : "");
}

TrainingSession::~TrainingSession() = default;

void TrainingSession::connect_servers() {
  for (const std::string& address : server_addresses_) {
    auto connection = wait(rpc::connect(io_.getNetwork(), rpc::parse_host_port(address, 7100, "server address")));
    servers_.push_back(connection->bootstrap().castAs<proto::ParameterServer>());
    connections_.push_back(kj::mv(connection));
  }
}

bool TrainingSession::report(proto::Progress::Kind kind, uint32_t epoch, uint64_t examples, double loss_sum,
                             uint64_t correct, double samples_per_second, const std::string& message) {
  auto request = coordinator_.reportProgressRequest();
  request.setNodeId(node_id_);
  auto r = request.initReport();
  r.setJobId(job_id_);
  r.setKind(kind);
  r.setEpoch(epoch);
  r.setStep(steps_done_);
  r.setExamples(examples);
  r.setLossSum(loss_sum);
  r.setCorrect(correct);
  r.setSamplesPerSecond(samples_per_second);
  r.setMessage(message);
  return wait(request.send().then([](auto&& r) { return r.getKeepGoing(); }));
}

void TrainingSession::report_steps(uint32_t epoch, uint64_t examples, double loss_sum, uint64_t correct,
                                   double samples_per_second) {
  auto request = coordinator_.reportProgressRequest();
  request.setNodeId(node_id_);
  auto r = request.initReport();
  r.setJobId(job_id_);
  r.setKind(proto::Progress::Kind::STEPS);
  r.setEpoch(epoch);
  r.setStep(steps_done_);
  r.setExamples(examples);
  r.setLossSum(loss_sum);
  r.setCorrect(correct);
  r.setSamplesPerSecond(samples_per_second);
  // Not waited for: training does not stop for the coordinator. A "stop" answer (the job was
  // cancelled or failed) ends the session at the next step; no answer (the coordinator is gone)
  // changes nothing, and the session goes on as long as it has data.
  reports_.add(request.send().then(
      [this](auto&& reply) { coordinator_says_stop_ = coordinator_says_stop_ || !reply.getKeepGoing(); },
      [this](kj::Exception&& e) {
        PSLOG(kDebug) << "job " << job_id_ << ": progress report lost: " << e.getDescription().cStr();
      }));
}

void TrainingSession::evaluate(uint32_t epoch, double train_rate) {
  auto request = coordinator_.openShardRequest();
  request.setJobId(job_id_);
  request.setNodeId(node_id_);
  request.setSplit(proto::Split::TEST);
  request.setEpoch(epoch);
  ShardReader reader(request.send().getStream(), wait_scope_);
  double loss = 0;
  uint64_t correct = 0, examples = 0;
  KJ_REQUIRE(!forward_ || !forward_->stale(), "evaluation on a stale first layer");
  proto::Batch::Reader batch;
  while (reader.next(&batch)) {
    if (batch.getSize() == 0) continue;
    KJ_REQUIRE(batch.getSize() <= labels_.size(), "test batch larger than the model's batch", batch.getSize());
    decode_batch(batch, static_cast<size_t>(model_->input_size()), inputs_.data(), labels_.data());
    const nn::LossResult r = model_->evaluate(params_.data(), inputs_.data(), labels_.data(), batch.getSize());
    loss += r.loss_sum;
    correct += static_cast<uint64_t>(r.correct);
    examples += batch.getSize();
  }
  report(proto::Progress::Kind::EVALUATION, epoch, examples, loss, correct, train_rate);
}

bool TrainingSession::run(const std::function<bool()>& should_stop) {
  const bool sync = spec_.training.mode == TrainingMode::kSync;
  connect_servers();
  pull_all(sync ? start_epoch_ * steps_per_epoch_ + start_step_ : 0, params_, versions_);
  watch_for_orders();
  const int64_t report_every = spec_.training.metrics_every_steps;
  for (uint32_t epoch = start_epoch_; epoch < spec_.training.epochs; ++epoch) {
    const uint64_t first_step = epoch == start_epoch_ ? start_step_ : 0;
    auto request = coordinator_.openShardRequest();
    request.setJobId(job_id_);
    request.setNodeId(node_id_);
    request.setSplit(proto::Split::TRAIN);
    request.setEpoch(epoch);
    request.setFromStep(first_step);
    ShardReader reader(request.send().getStream(), wait_scope_);

    double loss = 0, epoch_seconds = 0;
    uint64_t correct = 0, examples = 0, epoch_examples = 0;
    auto window_start = Clock::now();
    proto::Batch::Reader batch;
    for (uint64_t step = first_step; step < steps_per_epoch_; ++step) {
      if (should_stop()) return false;
      if (coordinator_says_stop_) {
        PSLOG(kInfo) << "job " << job_id_ << ": the coordinator says stop";
        return false;
      }
      if (pause_cut_ != 0) pause_for_cut(epoch, step);
      const auto step_start = Clock::now();
      KJ_REQUIRE(reader.next(&batch), "the data stream ended early", epoch, step);
      KJ_REQUIRE(batch.getStep() == step && batch.getEpoch() == epoch, "data stream out of order", batch.getStep(), step);
      const uint32_t n = batch.getSize();
      KJ_REQUIRE(n <= labels_.size(), "batch larger than the model's batch", n);
      const uint64_t push_step = sync ? epoch * steps_per_epoch_ + step : steps_done_;
      if (sparse_exchange_) plan_sparse_exchange(batch, reader, step + 1 == steps_per_epoch_);
      if (n > 0) {
        decode_batch(batch, static_cast<size_t>(model_->input_size()), inputs_.data(), labels_.data());
        // Overlap: ship the later layers' gradients while the earlier layers run backward, and
        // let the event loop write them out.
        auto ready = [&](size_t final_from) { push_final(final_from, push_step, n); };
        const auto* factored = factor_plan_.groups().empty() ? nullptr : &factor_plan_.factored_kernels();
        if (forward_) forward_->use_for(epoch, step, *model_);
        const nn::LossResult r = model_->compute_gradients(params_.data(), inputs_.data(), labels_.data(), n,
                                                           grads_.data(), ready, factored);
        if (!std::isfinite(r.loss_sum)) {
          throw Error("loss became " + std::to_string(r.loss_sum) + " at epoch " + std::to_string(epoch + 1) +
                      " step " + std::to_string(step + 1));
        }
        loss += r.loss_sum;
        correct += static_cast<uint64_t>(r.correct);
      } else {
        std::fill(grads_.begin(), grads_.end(), 0.0f);
      }
      examples += n;
      epoch_examples += n;
      const auto compute_end = Clock::now();
      compute_seconds_ += std::chrono::duration<double>(compute_end - step_start).count();
      finish_push(push_step, n);
      exchange_seconds_ += std::chrono::duration<double>(Clock::now() - compute_end).count();
      ++steps_done_;
      epoch_seconds += std::chrono::duration<double>(Clock::now() - step_start).count();
      if (static_cast<int64_t>(steps_done_) % report_every == 0 || step + 1 == steps_per_epoch_) {
        const double seconds = std::chrono::duration<double>(Clock::now() - window_start).count();
        report_steps(epoch, examples, loss, correct, examples / std::max(seconds, 1e-9));
        PSLOG(kDebug) << "job " << job_id_ << ": per step " << 1e3 * compute_seconds_ / report_every << " ms compute, "
                      << 1e3 * exchange_seconds_ / report_every << " ms push/pull, "
                      << 1e-6 * static_cast<double>(exchanged_bytes_) / static_cast<double>(report_every)
                      << " MB pushed and received";
        compute_seconds_ = exchange_seconds_ = 0;
        exchanged_bytes_ = 0;
        loss = 0;
        correct = examples = 0;
        window_start = Clock::now();
      }
    }
    evaluate(epoch, epoch_examples / std::max(epoch_seconds, 1e-9));
  }
  if (!sync) {
    for (auto& server : servers_) {
      auto request = server.workerFinishedRequest();
      request.setJobId(job_id_);
      request.setWorker(worker_index_);
      request.send().wait(wait_scope_);
    }
  }
  report(proto::Progress::Kind::FINISHED, static_cast<uint32_t>(spec_.training.epochs - 1), 0, 0, 0, 0);
  PSLOG(kInfo) << "job " << job_id_ << ": worker " << worker_index_ << " finished " << steps_done_ << " steps"
               << (forward_ ? " (" + std::to_string(forward_->forwarded_steps()) +
                                   " in this session with the first layer's forward on the servers)"
                             : "")
               << (late_pushes_ > 0 ? "; " + std::to_string(late_pushes_) + " of its pushes came late and were dropped"
                                    : "");
  return true;
}

}  // namespace pstrain
