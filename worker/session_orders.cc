#include "worker/session_orders.h"

#include <algorithm>
#include <cmath>

#include "common/base/error.h"
#include "common/base/log.h"

namespace pstrain {

SessionOrders::SessionOrders(const SessionFacts& facts, SessionWaits& waits, nn::DataParallelModel<float>& model,
                             ServerChunks& servers, ParameterExchange& exchange, SessionTables* tables,
                             std::vector<uint32_t> extra_slices)
    : facts_(facts),
      waits_(waits),
      model_(model),
      servers_(servers),
      exchange_(exchange),
      tables_(tables),
      extra_slices_(std::move(extra_slices)) {}

BatchShape SessionOrders::batch_shape() const {
  return model_batch_shape(facts_.spec.loss, model_.input_size(), model_.output_size());
}

void SessionOrders::watch() {
  auto request = facts_.coordinator.watchRequest();
  request.setNodeId(facts_.node_id);
  request.setJobId(facts_.job_id);
  request.setGeneration(facts_.generation);
  order_arrived_ =
      request.send()
          .then(
              [this](capnp::Response<proto::Coordinator::WatchResults>&& r) {
                if (r.getPauseCut() > 0) {
                  pause_cut_ = r.getPauseCut();
                  return;
                }
                const auto t = r.getTakeover();
                Takeover order;
                order.step = t.getStep();
                order.slice = t.getSlice();
                order.slice_count = t.getSliceCount();
                PSLOG(kInfo) << "job " << facts_.job_id << ": taking over slice " << order.slice << " of step "
                             << order.step << " from a lost worker";
                takeover_ = std::move(order);
              },
              [this](kj::Exception&& e) {
                if (e.getType() == kj::Exception::Type::DISCONNECTED) {
                  // No takeovers for this session (a coordinator restart, say): a loss then rolls
                  // back. Training goes on while the coordinator is away.
                  PSLOG(kDebug) << "job " << facts_.job_id << ": takeover watch ended: " << e.getDescription().cStr();
                  return;
                }
                // The coordinator itself ended the watch: the plan changed (a recovery).
                PSLOG(kInfo) << "job " << facts_.job_id << ": the coordinator ended this plan ("
                             << e.getDescription().cStr() << ")";
                waits_.replanned();
              })
          .fork();
}

void SessionOrders::pause_for_cut(kj::WaitScope& wait_scope, uint32_t epoch, uint64_t step, uint64_t steps_done) {
  // The cut's backup holds this worker's compression state, tagged with the position a session
  // resuming from the cut starts at (TrainingSession::run).
  if (!facts_.sync() && servers_.compression().keeps_state()) {
    servers_.put_state(wait_scope, facts_.worker_index, epoch * facts_.steps_per_epoch + step);
  }
  auto request = facts_.coordinator.pausedRequest();
  request.setNodeId(facts_.node_id);
  request.setJobId(facts_.job_id);
  request.setCut(pause_cut_);
  request.setEpoch(epoch);
  request.setStep(step);
  request.setStepsDone(steps_done);
  PSLOG(kDebug) << "job " << facts_.job_id << ": paused for cut " << pause_cut_ << " at epoch " << epoch + 1 << " step "
                << step;
  pause_cut_ = 0;
  waits_.wait(wait_scope, request.send().ignoreResult());
  watch();
}

kj::Promise<void> SessionOrders::compute_extras(kj::WaitScope& wait_scope, uint64_t global_step, uint32_t epoch,
                                                  uint64_t step, std::vector<std::unique_ptr<ShardReader>>& readers,
                                                  StepTotals& totals) {
  if (readers.empty()) return kj::READY_NOW;
  // As a takeover computes a lost worker's slice: the step's values (dense: a row-sparse exchange
  // holds only this worker's rows current), the slice's examples, a plain gradient pushed in the
  // slice's name. The servers sum the slices in slice order, so the step is the one its lost
  // worker would have made.
  const float* params = exchange_.step_values(wait_scope, global_step);
  extra_grads_.resize(readers.size());
  extra_inputs_.resize(static_cast<size_t>(model_.input_size() * model_.max_batch()));
  extra_labels_.resize(static_cast<size_t>(model_.max_batch() * model_.target_size()));
  auto pushes = kj::heapArrayBuilder<kj::Promise<void>>(readers.size() * (tables_ != nullptr ? 2 : 1));
  for (size_t i = 0; i < readers.size(); ++i) {
    proto::Batch::Reader batch;
    KJ_REQUIRE(readers[i]->next(wait_scope, &batch), "an extra slice's data stream ended early", extra_slices_[i], step);
    KJ_REQUIRE(batch.getStep() == step && batch.getEpoch() == epoch, "extra slice's data out of order", batch.getStep(),
               step);
    const uint32_t n = batch.getSize();
    KJ_REQUIRE(n <= model_.max_batch(), "extra slice's batch larger than the model's batch", n);
    AlignedFloats& grads = extra_grads_[i];
    grads.resize(model_.layout().dense_size());
    if (n > 0) {
      decode_batch(batch, batch_shape(), extra_inputs_.data(), extra_labels_.data());
      decode_ids(batch, &extra_ids_);
      if (tables_ != nullptr) fetch_rows(wait_scope, SessionTables::kExtra + i, n, global_step);
      const nn::LossResult r = model_.compute_gradients(params, extra_inputs_.data(), extra_labels_.data(), n,
                                                         grads.data(), {}, nullptr, {epoch, extra_ids_.data()});
      if (!std::isfinite(r.loss_sum)) {
        throw LossNotFinite("loss became " + std::to_string(r.loss_sum) + " at epoch " + std::to_string(epoch + 1) +
                            " step " + std::to_string(step + 1));
      }
      totals.loss += r.loss_sum;
      totals.correct += static_cast<uint64_t>(r.correct);
      totals.examples += n;
    } else {
      std::fill(grads.begin(), grads.end(), 0.0f);
      if (tables_ != nullptr) fetch_rows(wait_scope, SessionTables::kExtra + i, 0, global_step);
    }
    const GradientSlice slice{global_step, extra_slices_[i], facts_.worker_count, n, grads.data(), lr_scale_};
    pushes.add(servers_.push_without_values(slice));
    if (tables_ != nullptr) pushes.add(tables_->push(SessionTables::kExtra + i, slice));
  }
  return kj::joinPromises(pushes.finish());
}

void SessionOrders::finish_step(kj::WaitScope& wait_scope, const GradientSlice& mine, kj::Promise<void> extras) {
  auto all = exchange_.push_rest(mine).fork();
  KJ_IF_MAYBE(arrived, order_arrived_) {
    // Sync: the step may not complete without a lost worker's slice: wait for whichever comes first.
    if (!takeover_ && facts_.sync()) {
      waits_.wait(wait_scope, all.addBranch().exclusiveJoin(arrived->addBranch()));
    }
  }
  kj::Promise<void> taken_over = kj::READY_NOW;
  if (takeover_ && takeover_->step < mine.step) takeover_.reset();  // a step that completed anyway
  if (takeover_ && takeover_->step == mine.step) {
    taken_over = take_over(wait_scope);
    takeover_.reset();
    order_arrived_ = nullptr;
  }
  waits_.wait(wait_scope, all.addBranch());
  waits_.wait(wait_scope, kj::mv(taken_over));
  waits_.wait(wait_scope, kj::mv(extras));
  exchange_.take_values();
}

kj::Promise<void> SessionOrders::take_over(kj::WaitScope& wait_scope) {
  const Takeover order = *takeover_;
  const uint32_t epoch = static_cast<uint32_t>(order.step / facts_.steps_per_epoch);
  const uint64_t step_in_epoch = order.step % facts_.steps_per_epoch;
  takeover_grads_.resize(model_.layout().dense_size());
  uint32_t examples = 0;
  try {
    // The lost slice's examples of the step, from the data path every slice's examples come by.
    ShardReader reader(facts_.open_shard(proto::Split::TRAIN, epoch, step_in_epoch, order.slice),
                       /*batches_per_call=*/1, /*prefetch_batches=*/1);
    proto::Batch::Reader batch;
    KJ_REQUIRE(reader.next(wait_scope, &batch), "the lost slice's data stream is empty", order.slice);
    KJ_REQUIRE(batch.getEpoch() == epoch && batch.getStep() == step_in_epoch, "the lost slice's batch is of another step",
               batch.getEpoch(), batch.getStep());
    examples = batch.getSize();
    KJ_REQUIRE(examples <= model_.max_batch(), "takeover batch larger than the model's batch", examples);
    if (examples > 0) {
      extra_inputs_.resize(static_cast<size_t>(model_.input_size() * model_.max_batch()));
      extra_labels_.resize(static_cast<size_t>(model_.max_batch() * model_.target_size()));
      decode_batch(batch, batch_shape(), extra_inputs_.data(), extra_labels_.data());
      decode_ids(batch, &extra_ids_);
      // The step's version, dense: with a row-sparse exchange values() is current only in the
      // rows this worker's batch touches, so the exchange fetches it (a chunk the lost worker
      // pushed has moved one update on; its server still holds the step's version).
      const float* params = exchange_.step_values(wait_scope, order.step);
      if (tables_ != nullptr) {
        // Rows of the step's version exactly: a server the lost worker's push reached may have
        // completed the step, and its rows moved one update on; it still holds those the update
        // changed as they were (server/table_piece.h). Should a reply be of another version
        // anyway, this slice's gradient would not be the lost one's: no push, the takeover times
        // out and the job rolls back to its last backup, exact.
        tables_->take_newest_pulled(SessionTables::kTakeover);
        fetch_rows(wait_scope, SessionTables::kTakeover, examples, order.step, TableClient::At::kExactly);
        const uint64_t newest = tables_->take_newest_pulled(SessionTables::kTakeover);
        KJ_REQUIRE(newest <= order.step, "a server's table rows are past the step", newest);
      }
      model_.compute_gradients(params, extra_inputs_.data(), extra_labels_.data(), examples, takeover_grads_.data(),
                               {}, nullptr, {epoch, extra_ids_.data()});
    } else {
      std::fill(takeover_grads_.begin(), takeover_grads_.end(), 0.0f);
      if (tables_ != nullptr) fetch_rows(wait_scope, SessionTables::kTakeover, 0, order.step, TableClient::At::kExactly);
    }
  } catch (const kj::Exception& e) {
    // Cannot happen while the step waits for the lost slice; if it does, the coordinator's
    // takeover times out and the job rolls back.
    PSLOG(kWarning) << "job " << facts_.job_id << ": cannot take over step " << order.step << ": "
                    << e.getDescription().cStr();
    return kj::READY_NOW;
  }
  const GradientSlice slice{order.step, order.slice, order.slice_count, examples, takeover_grads_.data(), lr_scale_};
  if (tables_ == nullptr) return servers_.push_without_values(slice);
  auto pushes = kj::heapArrayBuilder<kj::Promise<void>>(2);
  pushes.add(servers_.push_without_values(slice));
  pushes.add(tables_->push(SessionTables::kTakeover, slice));
  return kj::joinPromises(pushes.finish());
}

void SessionOrders::fetch_rows(kj::WaitScope& wait_scope, size_t slot, uint32_t examples, uint64_t step,
                               TableClient::At at) {
  waits_.wait(wait_scope, tables_->fetch(slot, extra_inputs_.data(), examples, step, at));
  tables_->use(slot);
}

}  // namespace pstrain
