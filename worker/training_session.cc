#include "worker/training_session.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>

#include "common/error.h"
#include "common/log.h"
#include "worker/shard_reader.h"

namespace pstrain {
namespace {

using Clock = std::chrono::steady_clock;

// Converts a batch's bytes to [0, 1] floats, one column per example.
void decode_batch(proto::Batch::Reader batch, float* inputs, int32_t* labels) {
  const auto pixels = batch.getPixels();
  const auto label_bytes = batch.getLabels();
  constexpr float kScale = 1.0f / 255.0f;
  for (size_t i = 0; i < pixels.size(); ++i) inputs[i] = static_cast<float>(pixels[i]) * kScale;
  for (size_t i = 0; i < label_bytes.size(); ++i) labels[i] = label_bytes[i];
}

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
      sparse_exchange_(options.sparse_exchange && sparsity_.active()),
      generation_(a.getGeneration()) {
  for (auto s : a.getServers()) server_addresses_.push_back(rpc::to_string(s));
  const int64_t batch = (spec_.training.global_batch_size + worker_count_ - 1) / worker_count_;
  model_ = std::make_unique<nn::DataParallelModel<float>>(spec_.model, batch, options.replicas);
  const ParamLayout& layout = model_->layout();
  for (const ChunkInfo& c : chunks_) {
    KJ_REQUIRE(c.param < layout.params().size() && c.offset + c.size <= layout.params()[c.param].size &&
                   c.server < server_addresses_.size(),
               "assignment has a chunk that does not fit the model", c.key);
    chunk_offsets_.push_back(layout.params()[c.param].offset + c.offset);
  }
  versions_.assign(chunks_.size(), 0);
  // A session that resumes (after a recovery) counts the job's steps from where it starts, so
  // progress reports do not go backwards.
  steps_done_ = start_epoch_ * steps_per_epoch_ + start_step_;
  push_order_.resize(chunks_.size());
  for (size_t k = 0; k < chunks_.size(); ++k) push_order_[k] = k;
  std::sort(push_order_.begin(), push_order_.end(),
            [this](size_t a, size_t b) { return chunk_offsets_[a] > chunk_offsets_[b]; });
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
               << (sparse_exchange_ ? ", row-sparse exchange of the first layer" : "");
}

TrainingSession::~TrainingSession() = default;

template <typename T>
T TrainingSession::wait(kj::Promise<T>&& promise) {
  return promise
      .exclusiveJoin(stop_.addBranch().then([]() -> kj::Promise<T> {
        return KJ_EXCEPTION(DISCONNECTED, "the worker is stopping");
      }))
      .wait(wait_scope_);
}

void TrainingSession::connect_servers() {
  for (const std::string& address : server_addresses_) {
    auto connection = wait(rpc::connect(io_.getNetwork(), rpc::parse_host_port(address, 7100, "server address")));
    servers_.push_back(connection->bootstrap().castAs<proto::ParameterServer>());
    connections_.push_back(kj::mv(connection));
  }
}

void TrainingSession::pull_all(uint64_t min_version, AlignedFloats& into, std::vector<uint64_t>& versions,
                               bool exact) {
  into.resize(params_.size());
  versions.resize(chunks_.size());
  kj::Vector<kj::Promise<void>> replies;
  for (size_t k = 0; k < chunks_.size(); ++k) {
    auto request = servers_[chunks_[k].server].pullRequest();
    request.setJobId(job_id_);
    request.setKey(chunks_[k].key);
    request.setMinVersion(min_version);
    request.setExact(exact);
    replies.add(request.send().then([this, k, &into, &versions, exact, min_version](capnp::Response<proto::ParameterServer::PullResults>&& r) {
      const auto values = rpc::tensor_view(r.getValues(), chunks_[k].size, "pulled values");
      std::memcpy(into.data() + chunk_offsets_[k], values.data(), values.size_bytes());
      versions[k] = r.getVersion();
      KJ_REQUIRE(!exact || versions[k] == min_version, "server sent another version than the one asked for",
                 versions[k], min_version);
    }));
  }
  wait(kj::joinPromises(replies.releaseAsArray()));
}

void TrainingSession::push_chunk(size_t k, uint64_t step, uint32_t examples) {
  replies_.add(send_push(k, step, worker_index_, worker_count_, examples, grads_.data() + chunk_offsets_[k], true,
                         push_ranges_[k], reply_ranges_[k]));
}

kj::Promise<void> TrainingSession::send_push(size_t k, uint64_t step, uint32_t slice, uint32_t slice_count,
                                             uint32_t examples, const float* gradient, bool take_values,
                                             const InputSparsity::Ranges& ranges, const InputSparsity::Ranges& want) {
  auto request = servers_[chunks_[k].server].pushRequest();
  request.setJobId(job_id_);
  request.setKey(chunks_[k].key);
  request.setStep(step);
  request.setSlice(slice);
  request.setSliceCount(slice_count);
  request.setWorker(slice);
  request.setExamples(examples);
  request.setBaseVersion(versions_[k]);
  request.setGeneration(generation_);
  // Zero-copy: the message points into the gradient buffer, which stays untouched until every
  // reply is in (a reply implies its request was fully sent).
  if (ranges) {
    // Rows outside the ranges are exactly zero: they stay home.
    request.setSparseGradient(true);
    rpc::set_ranges(request.initGradientRanges(static_cast<unsigned>(ranges->size())), *ranges);
    auto parts = request.initGradientParts(static_cast<unsigned>(ranges->size()));
    for (unsigned i = 0; i < ranges->size(); ++i) {
      rpc::reference_part(parts, i, {gradient + (*ranges)[i].offset, (*ranges)[i].size});
      exchanged_bytes_ += (*ranges)[i].size * sizeof(float);
    }
  } else {
    rpc::reference_tensor(request.initGradient(), {gradient, chunks_[k].size});
    exchanged_bytes_ += chunks_[k].size * sizeof(float);
  }
  if (!take_values) {
    request.setSparseReply(true);  // with no ranges: an empty reply
  } else if (want) {
    request.setSparseReply(true);
    rpc::set_ranges(request.initReplyRanges(static_cast<unsigned>(want->size())), *want);
  }
  std::optional<std::vector<ChunkRange>> wanted = take_values ? want : std::nullopt;
  return request.send().then([this, k, take_values, wanted = std::move(wanted)](
                                 capnp::Response<proto::ParameterServer::PushResults>&& r) {
    if (!take_values) return;
    float* into = next_params_.data() + chunk_offsets_[k];
    if (wanted) {
      const auto parts = r.getValueParts();
      KJ_REQUIRE(parts.size() == wanted->size(), "reply has the wrong number of parts", parts.size(), wanted->size());
      for (unsigned i = 0; i < parts.size(); ++i) {
        const auto values = rpc::part_view(parts[i], (*wanted)[i].size, "updated values");
        std::memcpy(into + (*wanted)[i].offset, values.data(), values.size_bytes());
        exchanged_bytes_ += values.size_bytes();
      }
    } else {
      const auto values = rpc::tensor_view(r.getValues(), chunks_[k].size, "updated values");
      std::memcpy(into, values.data(), values.size_bytes());
      exchanged_bytes_ += values.size_bytes();
    }
    versions_[k] = r.getVersion();
  });
}

void TrainingSession::finish_push(uint64_t step, uint32_t examples) {
  for (; pushed_ < push_order_.size(); ++pushed_) push_chunk(push_order_[pushed_], step, examples);
  auto all = kj::joinPromises(replies_.releaseAsArray()).fork();
  replies_ = kj::Vector<kj::Promise<void>>();
  pushed_ = 0;
  KJ_IF_MAYBE(arrived, takeover_arrived_) {
    // Sync: the step may not complete without a lost worker's slice: wait for whichever comes first.
    if (!takeover_ && spec_.training.mode == TrainingMode::kSync) {
      wait(all.addBranch().exclusiveJoin(arrived->addBranch()));
    }
  }
  kj::Promise<void> taken_over = kj::READY_NOW;
  if (takeover_ && takeover_->step < step) takeover_.reset();  // a step that completed anyway
  if (takeover_ && takeover_->step == step) {
    taken_over = take_over();
    takeover_.reset();
    takeover_arrived_ = nullptr;
  }
  wait(all.addBranch());
  wait(kj::mv(taken_over));
  std::swap(params_, next_params_);
}

void TrainingSession::watch_for_orders() {
  auto request = coordinator_.watchRequest();
  request.setNodeId(node_id_);
  request.setJobId(job_id_);
  request.setGeneration(generation_);
  takeover_arrived_ =
      request.send()
          .then(
              [this](capnp::Response<proto::Coordinator::WatchResults>&& r) {
                if (r.getPauseCut() > 0) {
                  pause_cut_ = r.getPauseCut();
                  return;
                }
                const auto t = r.getTakeover();
                const auto batch = t.getBatch();
                KJ_REQUIRE(batch.getSize() <= labels_.size(), "takeover batch larger than the model's batch",
                           batch.getSize());
                Takeover order;
                order.step = t.getStep();
                order.slice = t.getSlice();
                order.slice_count = t.getSliceCount();
                order.examples = batch.getSize();
                order.inputs.resize(inputs_.size());
                order.labels.resize(labels_.size());
                decode_batch(batch, order.inputs.data(), order.labels.data());
                PSLOG(kInfo) << "job " << job_id_ << ": taking over slice " << order.slice << " of step " << order.step
                             << " from a lost worker";
                takeover_ = std::move(order);
              },
              [this](kj::Exception&& e) {
                // No takeovers for this session (a coordinator restart, say): a loss then rolls back.
                PSLOG(kDebug) << "job " << job_id_ << ": takeover watch ended: " << e.getDescription().cStr();
              })
          .fork();
}

void TrainingSession::pause_for_cut(uint32_t epoch, uint64_t step) {
  auto request = coordinator_.pausedRequest();
  request.setNodeId(node_id_);
  request.setJobId(job_id_);
  request.setCut(pause_cut_);
  request.setEpoch(epoch);
  request.setStep(step);
  request.setStepsDone(steps_done_);
  PSLOG(kDebug) << "job " << job_id_ << ": paused for cut " << pause_cut_ << " at epoch " << epoch + 1 << " step "
                << step;
  pause_cut_ = 0;
  wait(request.send().ignoreResult());
  watch_for_orders();
}

kj::Promise<void> TrainingSession::take_over() {
  Takeover& order = *takeover_;
  takeover_grads_.resize(grads_.size());
  const float* params = params_.data();
  if (sparse_exchange_ && order.examples > 0) {
    // params_ is current only in the rows this worker's batch touches: fetch the whole step's
    // version (a chunk the lost worker pushed has moved one update on; its server still holds
    // the step's version).
    std::vector<uint64_t> versions;
    try {
      pull_all(order.step, takeover_params_, versions, /*exact=*/true);
    } catch (const kj::Exception& e) {
      // Cannot happen while the step waits for the lost slice; if it does, the coordinator's
      // takeover times out and the job rolls back.
      PSLOG(kWarning) << "job " << job_id_ << ": cannot take over step " << order.step << ": "
                      << e.getDescription().cStr();
      return kj::READY_NOW;
    }
    params = takeover_params_.data();
  }
  if (order.examples > 0) {
    model_->compute_gradients(params, order.inputs.data(), order.labels.data(), order.examples,
                              takeover_grads_.data());
  } else {
    std::fill(takeover_grads_.begin(), takeover_grads_.end(), 0.0f);
  }
  kj::Vector<kj::Promise<void>> replies;
  for (size_t k = 0; k < chunks_.size(); ++k) {
    replies.add(send_push(k, order.step, order.slice, order.slice_count, order.examples,
                          takeover_grads_.data() + chunk_offsets_[k], false, std::nullopt, std::nullopt));
  }
  return kj::joinPromises(replies.releaseAsArray());
}

void TrainingSession::plan_sparse_exchange(proto::Batch::Reader batch, ShardReader& reader, bool last_step_of_epoch) {
  const auto marked = [this](proto::Batch::Reader b) {
    const auto pixels = b.getPixels();
    KJ_REQUIRE(b.getExampleSize() == sparsity_.features() &&
                   pixels.size() == static_cast<size_t>(b.getSize()) * b.getExampleSize(),
               "batch does not match the model's input", b.getExampleSize(), pixels.size());
    sparsity_.mark_features(pixels.begin(), b.getSize(), b.getExampleSize(), &feature_mask_);
    return sparsity_.chunk_ranges(feature_mask_);
  };
  push_ranges_ = marked(batch);
  proto::Batch::Reader next;
  // Dense before an evaluation (it reads every row), and when the next batch is not here yet.
  if (!last_step_of_epoch && reader.peek(&next) && next.getSize() > 0) {
    reply_ranges_ = marked(next);
  } else {
    reply_ranges_.assign(chunks_.size(), std::nullopt);
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
  proto::Batch::Reader batch;
  while (reader.next(&batch)) {
    if (batch.getSize() == 0) continue;
    KJ_REQUIRE(batch.getSize() <= labels_.size(), "test batch larger than the model's batch", batch.getSize());
    decode_batch(batch, inputs_.data(), labels_.data());
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
        decode_batch(batch, inputs_.data(), labels_.data());
        // Overlap: ship the later layers' gradients while the earlier layers run backward, and
        // let the event loop write them out.
        auto ready = [&](size_t final_from) {
          const size_t before = pushed_;
          while (pushed_ < push_order_.size() && chunk_offsets_[push_order_[pushed_]] >= final_from) {
            push_chunk(push_order_[pushed_++], push_step, n);
          }
          if (pushed_ != before) wait_scope_.poll();
        };
        const nn::LossResult r =
            model_->compute_gradients(params_.data(), inputs_.data(), labels_.data(), n, grads_.data(), ready);
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
  PSLOG(kInfo) << "job " << job_id_ << ": worker " << worker_index_ << " finished " << steps_done_ << " steps";
  return true;
}

}  // namespace pstrain
