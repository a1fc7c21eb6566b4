#include "worker/training_session.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <thread>

#include "common/base/error.h"
#include "common/base/log.h"
#include "common/data/job_spec.h"
#include "common/rpc/rpc_util.h"
#include "worker/batch_decode.h"
#include "worker/exchange_factory.h"
#include "worker/first_layer_groups.h"
#include "worker/precision.h"
#include "worker/shard_reader.h"

namespace pstrain {
namespace {

using Clock = std::chrono::steady_clock;

std::vector<std::string> server_addresses(proto::Assignment::Reader a) {
  std::vector<std::string> addresses;
  for (auto s : a.getServers()) addresses.push_back(rpc::to_string(s));
  return addresses;
}

int64_t batch_per_worker(const SessionSpec& spec, uint32_t workers) {
  return (spec.training.global_batch_size + workers - 1) / workers;
}

SessionSpec session_spec(const std::string& spec_json) {
  JobSpec spec = parse_accepted_job_spec(spec_json);
  return SessionSpec{std::move(spec.dataset), std::move(spec.model), std::move(spec.loss), std::move(spec.training),
                     spec.backup, std::move(spec.optimizer), spec.reduce_on_plateau.enabled, spec.precision};
}

}  // namespace

TrainingSession::TrainingSession(kj::AsyncIoProvider& io, proto::Coordinator::Client coordinator, uint32_t node_id,
                                 proto::Assignment::Reader a, SessionOptions options, kj::ForkedPromise<void>& stop)
    : io_(io),
      waits_(stop),
      facts_{kj::mv(coordinator),
             node_id,
             rpc::to_string(a.getJobId()),
             session_spec(rpc::to_string(a.getSpecJson())),
             a.getWorkerIndex(),
             a.getWorkerCount(),
             a.getStepsPerEpoch(),
             a.getGeneration()},
      start_epoch_(a.getStartEpoch()),
      start_step_(a.getStartStep()),
      model_(std::make_unique<nn::DataParallelModel<float>>(
          facts_.spec.model, batch_per_worker(facts_.spec, facts_.worker_count), options.replicas, facts_.spec.loss)),
      servers_(facts_.job_id, facts_.generation,
               rpc::WorkerPass{node_id, std::string(reinterpret_cast<const char*>(a.getWorkerToken().begin()),
                                                    a.getWorkerToken().size())},
               rpc::get_chunks(a.getChunks()), server_addresses(a), model_->layout(), stop),
      cluster_(options.cluster),
      progress_(options.progress),
      slow_step_ms_(options.slow_step_ms),
      reports_(facts_, waits_) {
  const SessionSpec& spec = facts_.spec;
  const int64_t batch = model_->max_batch();
  if (const std::string precision = apply_precision(spec.precision, *model_); !precision.empty()) {
    PSLOG(kInfo) << "job " << facts_.job_id << ": " << precision;
  }
  if (options.read_store) open_stores(a.getTrainStore(), a.getTestStore());
  // Every worker computes the first layer per server's rows, whether or not the servers do it
  // (the same sums either way, and what the trainer's `servers` option reproduces).
  int first_kernel = -1;
  const bool tables = model_->layout().has_sparse();
  if (group_first_layer_by_server(*model_, servers_.chunks(), static_cast<uint32_t>(servers_.server_count()))) {
    first_kernel = model_->first_replica().first_layer_kernel();
  }
  // A compressed job exchanges whole chunks (the codecs work on them; see CompressionSpec).
  const bool compressed = spec.training.compression.kind != CompressionKind::kNone;
  servers_.compression().configure(spec.training.compression, spec.model.seed);
  // Mixed precision: the kernels only our bfloat16 products read come back in bfloat16 (the same
  // bits here, half the bytes).
  if (options.bf16_kernel_replies) servers_.reply_rounded(model_->first_replica().rounded_kernels());
  if (facts_.sync() && servers_.compression().keeps_state()) {
    // The servers' backup points (server/parameter_server.cc, configure): this worker's residual
    // (and warm-start factors) goes into each backup, and comes back after a restore.
    const BackupSpec backup = spec.backup;
    const uint64_t steps_per_epoch = facts_.steps_per_epoch > 0 ? facts_.steps_per_epoch : UINT64_MAX;
    servers_.compression().set_backup_points([backup, steps_per_epoch](uint64_t v) {
      if (v == 0) return false;
      switch (backup.frequency) {
        case BackupSpec::Frequency::kNone: return false;
        case BackupSpec::Frequency::kEpoch: return v % steps_per_epoch == 0;
        case BackupSpec::Frequency::kSteps: return v % static_cast<uint64_t>(backup.steps) == 0;
      }
      return false;
    });
  }
  // Sparse tables travel by their rows (session_tables.h); the dense tensors then whole.
  exchange_ = make_parameter_exchange(compressed || tables ? Exchange::kDense : options.exchange, options.replicas,
                                      servers_, *model_, spec.model, spec.optimizer, first_kernel);
  if (tables) {
    tables_ = std::make_unique<SessionTables>(*model_, servers_.table_pieces(),
                                              TableClient::Caller{facts_.job_id, servers_.pass(), facts_.generation},
                                              servers_.connections());
  }
  std::vector<uint32_t> extra_slices;
  for (const uint32_t slice : a.getExtraSlices()) extra_slices.push_back(slice);
  orders_ = std::make_unique<SessionOrders>(facts_, waits_, *model_, servers_, *exchange_, tables_.get(),
                                            std::move(extra_slices));
  // A session that resumes (after a recovery) counts the job's steps from where it starts, so
  // progress reports do not go backwards.
  steps_done_ = start_epoch_ * facts_.steps_per_epoch + start_step_;
  reports_.start_at(steps_done_);
  grads_.resize(model_->layout().dense_size());  // sparse tables' gradients are compact (tables_)
  inputs_.resize(static_cast<size_t>(model_->input_size() * batch));
  labels_.resize(static_cast<size_t>(batch * model_->target_size()));
  PSLOG(kInfo) << "job " << facts_.job_id << ": worker " << facts_.worker_index << " of " << facts_.worker_count
               << ", " << facts_.steps_per_epoch << " steps per epoch, batch " << batch << ", "
               << servers_.chunks().size() << " chunks on " << servers_.server_count() << " server(s)"
               << exchange_->describe()
               << (compressed ? std::string(", compression ") + compression_kind_name(spec.training.compression.kind)
                              : std::string())
               << (servers_.rounded_chunks() > 0 ? ", " + std::to_string(servers_.rounded_chunks()) + " chunk(s) of bfloat16 kernels replied in bfloat16"
                                        : std::string());
}

TrainingSession::~TrainingSession() = default;

void TrainingSession::open_stores(proto::StoredShards::Reader train, proto::StoredShards::Reader test) {
  WorkerStore::Reporter reporter{facts_.coordinator, facts_.node_id, facts_.job_id, facts_.generation, facts_.sync()};
  std::string why_not;
  if (test.getDir().size() > 0) facts_.test_store = WorkerStore::open(test, reporter, &why_not);
  if (train.getDir().size() == 0) return;
  std::optional<HeldOutIds> parts;
  if (train.getHoldOutFraction() > 0) {  // a hold-out: both its parts, cut as the coordinator cut them
    parts = WorkerStore::held_out(train, &why_not);
    if (parts) {
      facts_.store = WorkerStore::open(train, reporter, &why_not, std::move(parts->train));
      if (facts_.store) facts_.validation_store = WorkerStore::open(train, reporter, &why_not, std::move(parts->validation));
    }
  } else {
    facts_.store = WorkerStore::open(train, reporter, &why_not);
  }
  if (facts_.store) {
    const SessionSpec& spec = facts_.spec;
    // The coordinator's plan, computed here: the same spec, split size and slice count.
    facts_.store->set_plan(DataPlan(spec.dataset.shard_policy, spec.training.mode,
                                    static_cast<uint32_t>(facts_.store->examples()), spec.training.global_batch_size,
                                    facts_.worker_count, spec.dataset.shuffle_seed, spec.dataset.shuffle_window));
    PSLOG(kInfo) << "job " << facts_.job_id << ": worker " << facts_.worker_index
                 << " reads its training examples from the dataset store at " << facts_.store->dir()
                 << (facts_.validation_store ? ", its validation examples" : "")
                 << (facts_.test_store ? ", and its test examples" : "");
  } else {
    PSLOG(kInfo) << "job " << facts_.job_id << ": worker " << facts_.worker_index
                 << " reads its training examples through the coordinator: " << why_not;
  }
}

float TrainingSession::epoch_lr_scale(kj::WaitScope& wait_scope, uint32_t epoch) {
  if (epoch == 0) return 1.0f;
  auto request = facts_.coordinator.learningRateScaleRequest();
  request.setNodeId(facts_.node_id);
  request.setJobId(facts_.job_id);
  request.setEpoch(epoch);
  const float scale = waits_.wait(wait_scope, request.send().then([](auto&& r) { return r.getScale(); }));
  KJ_REQUIRE(scale >= 0.0f && scale <= 1.0f, "the coordinator sent a learning-rate scale out of [0, 1]", scale);
  if (scale != 1.0f) {
    PSLOG(kInfo) << "job " << facts_.job_id << ": epoch " << epoch + 1 << " trains with the learning rate times " << scale
                 << " (reduce_on_plateau)";
  }
  return scale;
}

void TrainingSession::evaluate(kj::WaitScope& wait_scope, uint32_t epoch, double train_rate) {
  evaluate_split(wait_scope, proto::Split::TEST, epoch, train_rate);
  if (facts_.spec.training.validation_fraction > 0) evaluate_split(wait_scope, proto::Split::VALIDATION, epoch, train_rate);
}

void TrainingSession::evaluate_split(kj::WaitScope& wait_scope, proto::Split split, uint32_t epoch, double train_rate) {
  nn::LossResult sums;
  uint64_t examples = 0;
  const float* params = exchange_->current_values();
  // This worker's slice, and those of its extra slices: one report for all.
  std::vector<int64_t> slices{-1};
  for (uint32_t s : orders_->extra_slices()) slices.push_back(s);
  for (const int64_t slice : slices) {
    ShardReader reader(facts_.open_shard(split, epoch, 0, slice));
    proto::Batch::Reader batch;
    while (reader.next(wait_scope, &batch)) {
      if (batch.getSize() == 0) continue;
      KJ_REQUIRE(batch.getSize() <= model_->max_batch(), "test batch larger than the model's batch", batch.getSize());
      decode_batch(batch, batch_shape(), inputs_.data(), labels_.data());
      if (tables_) {
        waits_.wait(wait_scope, tables_->fetch(SessionTables::kOwn, inputs_.data(), batch.getSize(), 0));
        tables_->use(SessionTables::kOwn);
      }
      sums += model_->evaluate(params, inputs_.data(), labels_.data(), batch.getSize());
      examples += batch.getSize();
      if (progress_ != nullptr) progress_->fetch_add(1, std::memory_order_relaxed);
    }
  }
  reports_.report_evaluation(wait_scope, split,
                             ReportFigures{epoch, steps_done_, examples, sums.loss_sum,
                                           static_cast<uint64_t>(sums.correct), train_rate},
                             sums);
}

bool TrainingSession::run(kj::WaitScope& wait_scope, const std::function<bool()>& should_stop) {
  const bool sync = facts_.sync();
  const SessionSpec& spec = facts_.spec;
  const uint64_t steps_per_epoch = facts_.steps_per_epoch;
  servers_.connect(wait_scope, io_, cluster_);
  // A session that starts after step 0 (a recovery) takes back its compression state from the
  // restored backup: sync, the one of the step it starts from; async, the one it put at the cut
  // it resumes from (tagged with its position then).
  const uint64_t start = start_epoch_ * steps_per_epoch + start_step_;
  std::optional<StateWanted> state;
  if (start > 0) state = StateWanted{facts_.worker_index, sync ? std::nullopt : std::optional<uint64_t>(start)};
  servers_.pull(wait_scope, sync ? start : 0, state);
  if (servers_.compression().states_taken() > 0) {
    PSLOG(kInfo) << "job " << facts_.job_id << ": worker " << facts_.worker_index << " took its compression state back for "
                 << servers_.compression().states_taken() << " of " << servers_.chunks().size() << " chunks";
  }
  orders_->watch();
  const int64_t report_every = spec.training.metrics_every_steps;
  for (uint32_t epoch = start_epoch_; epoch < spec.training.epochs; ++epoch) {
    const uint64_t first_step = epoch == start_epoch_ ? start_step_ : 0;
    ShardReader reader(facts_.open_shard(proto::Split::TRAIN, epoch, first_step, -1));
    std::vector<std::unique_ptr<ShardReader>> extra_readers;
    for (uint32_t s : orders_->extra_slices()) {
      extra_readers.push_back(std::make_unique<ShardReader>(facts_.open_shard(proto::Split::TRAIN, epoch, first_step, s)));
    }

    const float lr_scale = sync && spec.reduce_on_plateau ? epoch_lr_scale(wait_scope, epoch) : 1.0f;
    orders_->set_lr_scale(lr_scale);
    double loss = 0, epoch_seconds = 0;
    uint64_t correct = 0, examples = 0, epoch_examples = 0;
    auto window_start = Clock::now();
    proto::Batch::Reader batch, next;
    for (uint64_t step = first_step; step < steps_per_epoch; ++step) {
      if (should_stop()) return false;
      if (reports_.coordinator_says_stop()) {
        PSLOG(kInfo) << "job " << facts_.job_id << ": the coordinator says stop";
        return false;
      }
      if (orders_->pause_due()) orders_->pause_for_cut(wait_scope, epoch, step, steps_done_);
      const auto step_start = Clock::now();
      KJ_REQUIRE(reader.next(wait_scope, &batch), "the data stream ended early", epoch, step);
      KJ_REQUIRE(batch.getStep() == step && batch.getEpoch() == epoch, "data stream out of order", batch.getStep(), step);
      const uint32_t n = batch.getSize();
      KJ_REQUIRE(n <= model_->max_batch(), "batch larger than the model's batch", n);
      const GradientSlice mine{sync ? epoch * steps_per_epoch + step : steps_done_, facts_.worker_index, facts_.worker_count, n,
                               grads_.data(), lr_scale};
      // The next step's batch if it is here already; none after the epoch's last step, where
      // an evaluation follows.
      kj::Maybe<proto::Batch::Reader> known_next = nullptr;
      if (step + 1 != steps_per_epoch && reader.peek(&next) && next.getSize() > 0) known_next = next;
      exchange_->begin_step(batch, known_next);
      if (n > 0) {
        decode_batch(batch, batch_shape(), inputs_.data(), labels_.data());
        decode_ids(batch, &ids_);
        if (tables_) {  // the batch's rows at the step's version (async: the latest)
          waits_.wait(wait_scope, tables_->fetch(SessionTables::kOwn, inputs_.data(), n, sync ? mine.step : 0));
          tables_->use(SessionTables::kOwn);
        }
        // Overlap: ship the later layers' gradients while the earlier layers run backward, and
        // let the event loop write them out.
        auto ready = [&](size_t final_from) { exchange_->gradients_ready(wait_scope, mine, final_from); };
        const nn::LossResult r = model_->compute_gradients(servers_.values(), inputs_.data(), labels_.data(), n,
                                                           grads_.data(), ready, exchange_->factored_kernels(),
                                                           {epoch, ids_.data()});
        if (!std::isfinite(r.loss_sum)) {
          throw LossNotFinite("loss became " + std::to_string(r.loss_sum) + " at epoch " + std::to_string(epoch + 1) +
                      " step " + std::to_string(step + 1));
        }
        loss += r.loss_sum;
        correct += static_cast<uint64_t>(r.correct);
      } else {
        std::fill(grads_.begin(), grads_.end(), 0.0f);
      }
      // The long-step test hook: this loop is as busy as a step of a big model would keep it.
      if (slow_step_ms_ > 0) std::this_thread::sleep_for(std::chrono::milliseconds(slow_step_ms_));
      kj::Promise<void> table_pushes = kj::READY_NOW;
      if (tables_) {
        // An empty batch pushes no rows, but to every piece: a sync step waits for every slice.
        if (n == 0) waits_.wait(wait_scope, tables_->fetch(SessionTables::kOwn, inputs_.data(), 0, 0));
        const BatchShape shape = batch_shape();
        table_pushes = tables_->push(SessionTables::kOwn, mine, known_next, &shape);
      }
      StepTotals extra;
      auto extras = orders_->compute_extras(wait_scope, mine.step, epoch, step, extra_readers, extra)
                        .then([p = kj::mv(table_pushes)]() mutable { return kj::mv(p); });
      loss += extra.loss;
      correct += extra.correct;
      examples += n + extra.examples;
      epoch_examples += n + extra.examples;
      const auto compute_end = Clock::now();
      compute_seconds_ += std::chrono::duration<double>(compute_end - step_start).count();
      orders_->finish_step(wait_scope, mine, kj::mv(extras));
      exchange_seconds_ += std::chrono::duration<double>(Clock::now() - compute_end).count();
      ++steps_done_;
      if (progress_ != nullptr) progress_->fetch_add(1, std::memory_order_relaxed);
      epoch_seconds += std::chrono::duration<double>(Clock::now() - step_start).count();
      if (static_cast<int64_t>(steps_done_) % report_every == 0 || step + 1 == steps_per_epoch) {
        const double seconds = std::chrono::duration<double>(Clock::now() - window_start).count();
        if (tables_) tables_->drain_counts(servers_.counts());
        const uint64_t bytes = reports_.bytes_since_report(servers_.counts());
        PSLOG(kDebug) << "job " << facts_.job_id << ": per step " << 1e3 * compute_seconds_ / report_every << " ms compute, "
                      << 1e3 * exchange_seconds_ / report_every << " ms push/pull, "
                      << 1e-6 * static_cast<double>(bytes) / static_cast<double>(report_every)
                      << " MB pushed and received";
        reports_.report_steps(ReportFigures{epoch, steps_done_, examples, loss, correct, examples / std::max(seconds, 1e-9)},
                              servers_.counts());
        compute_seconds_ = exchange_seconds_ = 0;
        loss = 0;
        correct = examples = 0;
        window_start = Clock::now();
      }
    }
    evaluate(wait_scope, epoch, epoch_examples / std::max(epoch_seconds, 1e-9));
  }
  if (!sync) servers_.finish(wait_scope, facts_.worker_index);
  reports_.report(wait_scope, proto::Progress::Kind::FINISHED,
                  ReportFigures{static_cast<uint32_t>(spec.training.epochs - 1), steps_done_, 0, 0, 0, 0});
  const std::optional<uint64_t> forwarded = exchange_->forwarded_steps();
  const uint64_t late = servers_.counts().late_pushes;
  PSLOG(kInfo) << "job " << facts_.job_id << ": worker " << facts_.worker_index << " finished " << steps_done_ << " steps"
               << (forwarded ? " (" + std::to_string(*forwarded) +
                                   " in this session with the first layer's forward on the servers)"
                             : "")
               << (late > 0 ? "; " + std::to_string(late) + " of its pushes came late and were dropped" : "")
               << (tables_ ? "; sparse tables' rows of " + std::to_string(tables_->fetched_ahead()) + " of " +
                                 std::to_string(tables_->fetches()) + " batches came with the last push's replies"
                           : "");
  return true;
}

}  // namespace pstrain
