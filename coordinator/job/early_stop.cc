#include "coordinator/job/early_stop.h"

#include <algorithm>
#include <cstdio>
#include <sstream>

#include "common/base/log.h"

namespace pstrain {
namespace {

// An epoch record's figure by its name (early_stopping_metrics()).
std::optional<double> figure(const EpochMetric& m, const std::string& name) {
  if (name == "test_loss") return m.test_loss;
  if (name == "train_loss") return m.train_loss;
  if (name == "test_mae") return m.test_mae;
  if (name == "test_rmse") return m.test_rmse;
  if (name == "test_r2") return m.test_r2;
  if (name == "test_auc") return m.test_auc;
  if (name == "test_top5_accuracy") return m.test_top5_accuracy;
  if (name == "val_loss") return m.val_loss;
  if (name == "val_accuracy") return m.val_accuracy;
  if (name == "val_mae") return m.val_mae;
  if (name == "val_rmse") return m.val_rmse;
  if (name == "val_r2") return m.val_r2;
  if (name == "val_auc") return m.val_auc;
  if (name == "val_top5_accuracy") return m.val_top5_accuracy;
  if (m.test_mae) return std::nullopt;  // a regression job's accuracies are not figures
  if (name == "test_accuracy") return m.test_accuracy;
  if (name == "train_accuracy") return m.train_accuracy;
  return std::nullopt;
}

std::optional<int64_t> one_based(std::optional<int64_t> epoch) {
  if (!epoch) return std::nullopt;
  return *epoch + 1;
}

constexpr int64_t kPollMs = 50;

}  // namespace

std::vector<std::optional<double>> recorded_figures(const JobRecord& record, const std::string& monitor,
                                                    std::vector<bool>& seen) {
  std::vector<std::optional<double>> values;
  seen.clear();
  for (const EpochMetric& m : record.epoch_history) {
    if (m.epoch == 0) continue;
    const size_t e = m.epoch - 1;
    if (values.size() <= e) {
      values.resize(e + 1);
      seen.resize(e + 1, false);
    }
    values[e] = figure(m, monitor);
    seen[e] = true;
  }
  return values;
}

bool EarlyStop::epoch_recorded() {
  if (!enabled() || stopping_) return false;
  const EarlyStoppingSpec& spec = job_.spec.early_stopping;
  const std::optional<JobRecord> record = job_.store.get(job_.id);
  if (!record) return false;
  std::vector<bool> seen;
  std::vector<std::optional<double>> values = recorded_figures(*record, spec.monitor, seen);
  // A job resumed from a checkpoint records from its first epoch on: the ones before are not
  // looked at (as a fresh Keras callback in a resumed fit); a gap after that (a lost record) ends
  // what is judged.
  const auto first = std::find(seen.begin(), seen.end(), true);
  const auto gap = std::find(first, seen.end(), false);
  values.resize(static_cast<size_t>(gap - seen.begin()));
  decision_ = decide_early_stopping(spec, values);
  judged_ = static_cast<int64_t>(values.size());
  if (decision_.stopped_epoch) stopping_ = true;
  record_standing();
  if (stopping_) {
    PSLOG(kInfo) << "job " << job_.id << ": " << reason();
    std::printf("%s\n", reason().c_str());
    std::fflush(stdout);
  }
  return stopping_;
}

bool EarlyStop::ends_with_best() {
  if (!enabled() || stopping_ || !job_.spec.early_stopping.restore_best || !decision_.best_epoch) return false;
  if (*decision_.best_epoch + 1 >= judged_) return false;
  decision_.stopped_epoch = judged_ - 1;
  stopping_ = true;
  record_standing();
  PSLOG(kInfo) << "job " << job_.id << ": " << reason();
  return true;
}

void EarlyStop::record_standing() {
  const EarlyStoppingSpec& spec = job_.spec.early_stopping;
  const uint64_t per_epoch = job_.steps_per_epoch();
  job_.store.update(job_.id, [&](JobRecord& r) {
    EarlyStopStatus status;
    status.monitor = spec.monitor;
    status.best_epoch = one_based(decision_.best_epoch);
    status.best = decision_.best;
    status.wait = decision_.wait;
    status.stopped_epoch = one_based(decision_.stopped_epoch);
    if (stopping_) {
      status.model_epoch = model_epoch();
      status.model_step = static_cast<int64_t>(static_cast<uint64_t>(model_epoch()) * per_epoch);
    }
    r.early_stopping = std::move(status);
  });
}

bool EarlyStop::keeps(int64_t step) const {
  if (!enabled() || !job_.plan) return false;
  const int64_t per_epoch = static_cast<int64_t>(job_.steps_per_epoch());
  if (per_epoch == 0) return false;
  if (step > judged_ * per_epoch) return true;  // an epoch not judged yet
  if (decision_.best_epoch && step == (*decision_.best_epoch + 1) * per_epoch) return true;
  return stopping_ && step == static_cast<int64_t>(model_step());
}

void EarlyStop::set_model_figures(JobRecord& r) const {
  const auto epoch = static_cast<uint32_t>(model_epoch());
  // The newest record of that epoch (a rollback records redone epochs again).
  const auto it = std::find_if(r.epoch_history.rbegin(), r.epoch_history.rend(),
                               [&](const EpochMetric& m) { return m.epoch == epoch; });
  if (it == r.epoch_history.rend()) return;
  set_epoch_figures(r, *it);
}

std::string EarlyStop::reason() const {
  const EarlyStoppingSpec& spec = job_.spec.early_stopping;
  std::ostringstream s;
  if (static_cast<int64_t>(stopped_epochs()) == job_.spec.training.epochs) {
    s << "early stopping: ran all " << job_.spec.training.epochs << " epochs; restore_best: the model is epoch "
      << model_epoch() << "'s (best " << spec.monitor << " " << decision_.best.value_or(0) << ")";
    return s.str();
  }
  s << "early stopping: " << spec.monitor << " did not improve";
  if (spec.min_delta > 0) s << " by more than " << spec.min_delta;
  s << " for " << decision_.wait << " epoch(s) after epoch " << (decision_.best_epoch ? *decision_.best_epoch + 1 : 0);
  if (decision_.best) s << " (best " << *decision_.best << ")";
  s << "; stopped after epoch " << (decision_.stopped_epoch ? *decision_.stopped_epoch + 1 : 0) << " of "
    << job_.spec.training.epochs << "; the model is epoch " << model_epoch() << "'s";
  return s.str();
}

kj::Promise<int64_t> EarlyStop::write_model() {
  KJ_REQUIRE(stopping_, "write_model before the rule said stop");
  return wait_and_write(now_ms() + job_.options.server_move_timeout / kj::MILLISECONDS);
}

kj::Promise<int64_t> EarlyStop::wait_and_write(int64_t deadline_ms) {
  const int64_t step = static_cast<int64_t>(model_step());
  const std::optional<JobRecord> record = job_.store.get(job_.id);
  const bool stored = record && std::any_of(record->checkpoints.begin(), record->checkpoints.end(),
                                            [&](const CheckpointInfo& c) { return c.step == step; });
  if (!stored) {
    if (now_ms() > deadline_ms) {
      return KJ_EXCEPTION(FAILED, "early stopping: no checkpoint of the model's epoch was stored", step);
    }
    return job_.io.getTimer().afterDelay(kPollMs * kj::MILLISECONDS).then([this, deadline_ms] {
      return wait_and_write(deadline_ms);
    });
  }
  JobStore& store = job_.store;
  return store.files()
      .model_from_checkpoint([&store, id = job_.id, step] { return store.checkpoint_file(id, step); }, job_.layout,
                             job_.model_file_metadata(model_epoch(), model_step()))
      .then([this](std::string file) {
        const int64_t bytes = static_cast<int64_t>(file.size());
        job_.store.write_model_piece(job_.id, 0, std::move(file));
        return bytes;
      });
}

}  // namespace pstrain
