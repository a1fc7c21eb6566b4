#include "coordinator/job/job_progress.h"

#include <algorithm>
#include <cstdio>

namespace pstrain {

JobProgress::JobProgress(std::string job_id, uint32_t epochs, JobStore& store)
    : job_id_(std::move(job_id)), store_(store), epochs_(epochs) {}

void JobProgress::reset_workers(size_t count, uint64_t steps) {
  workers_.assign(count, WorkerProgress{});
  for (auto& w : workers_) w.steps = steps;
}

bool JobProgress::all_finished() const {
  return std::all_of(workers_.begin(), workers_.end(), [](const WorkerProgress& w) { return w.finished; });
}

uint64_t JobProgress::steps_done(bool sync) const {
  uint64_t done = 0;
  for (const auto& w : workers_) done = sync ? std::max(done, w.steps) : done + w.steps;
  return done;
}

double JobProgress::total_rate() const {
  double rate = 0;
  for (const auto& w : workers_) rate += w.rate;
  return rate;
}

void JobProgress::restart_epochs_from(size_t first) {
  for (size_t e = first; e < epochs_.size(); ++e) epochs_[e] = EpochMetrics{};
}

void JobProgress::add_evaluation(uint32_t epoch, double loss_sum, uint64_t correct, uint64_t examples, double rate,
                                 size_t workers, const std::optional<nn::RegressionSums>& regression,
                                 uint64_t top_k_correct, const std::optional<nn::BinaryScores>& binary) {
  EpochMetrics& m = epochs_[epoch];
  m.test_top_k_correct += top_k_correct;
  if (binary) {
    if (!m.test_binary) m.test_binary.emplace();
    *m.test_binary += *binary;
  }
  if (regression) {
    if (!m.test_regression) m.test_regression.emplace();
    *m.test_regression += *regression;
  }
  m.test_loss_sum += loss_sum;
  m.test_correct += correct;
  m.test_examples += examples;
  m.samples_per_second += rate;
  if (++m.evaluations == workers) record_epoch(epoch, false);
}

void JobProgress::record_epoch(uint32_t epoch, bool partial) {
  EpochMetrics& m = epochs_[epoch];
  if (m.recorded || epoch >= record_limit_) return;
  m.recorded = true;
  const double train_n = std::max<uint64_t>(1, m.train_examples), test_n = std::max<uint64_t>(1, m.test_examples);
  const EpochMetric base{epoch + 1,         m.train_loss_sum / train_n, m.train_correct / train_n,
                           m.test_loss_sum / test_n, m.test_correct / test_n, m.samples_per_second,
                           now_ms()};
  EpochMetric metric = base;
  if (m.test_examples > 0 && classes_ > nn::kTopK && !m.test_regression) {
    metric.test_top5_accuracy = static_cast<double>(m.test_top_k_correct) / test_n;
  }
  if (m.test_binary) metric.test_auc = m.test_binary->auc();
  if (m.test_regression) {
    metric.test_mae = m.test_regression->mae();
    metric.test_rmse = m.test_regression->rmse();
    metric.test_r2 = m.test_regression->r2();
    std::printf("epoch %u: train loss %.4f | test loss %.4f mae %.4f rmse %.4f r2 %.4f | %.0f samples/s%s\n", epoch + 1,
                metric.train_loss, metric.test_loss, *metric.test_mae, *metric.test_rmse, *metric.test_r2,
                metric.samples_per_second, partial ? " (test: part of the split, a worker was lost)" : "");
  } else {
    std::printf("epoch %u: train loss %.4f accuracy %.4f | test loss %.4f accuracy %.4f | %.0f samples/s%s\n", epoch + 1,
                metric.train_loss, metric.train_accuracy, metric.test_loss, metric.test_accuracy,
                metric.samples_per_second, partial ? " (test: part of the split, a worker was lost)" : "");
  }
  std::fflush(stdout);
  store_.append_epoch(job_id_, metric);
  store_.update(job_id_, [&](JobRecord& r) {
    r.test_loss = metric.test_loss;
    r.test_accuracy = metric.test_mae ? std::nullopt : std::optional<double>(metric.test_accuracy);
    r.test_mae = metric.test_mae;
    r.test_rmse = metric.test_rmse;
    r.test_r2 = metric.test_r2;
    r.test_top5_accuracy = metric.test_top5_accuracy;
    r.test_auc = metric.test_auc;
    r.train_loss = metric.train_loss;
    r.train_accuracy = metric.test_mae ? std::nullopt : std::optional<double>(metric.train_accuracy);
    if (partial) {
      r.notes.push_back("epoch " + std::to_string(epoch + 1) + ": test metrics on " + std::to_string(m.test_examples) +
                        " examples (a worker was lost before evaluating its part)");
    }
  });
  if (epoch_recorded_) {
    // The chance-accuracy guard reads classification accuracy only.
    epoch_recorded_(epoch, m.test_examples > 0 && !m.test_regression ? std::optional<double>(metric.test_accuracy)
                                                                     : std::nullopt);
  }
}

void JobProgress::record_partial_epochs(uint32_t before) {
  for (uint32_t e = 0; e < before && e < epochs_.size(); ++e) {
    if (!epochs_[e].recorded && epochs_[e].evaluations > 0) record_epoch(e, true);
  }
}

double JobProgress::final_accuracy() const {
  const EpochMetrics& last = epochs_.back();
  return last.test_examples ? static_cast<double>(last.test_correct) / last.test_examples : 0.0;
}

void JobProgress::check_ledger(uint64_t steps_per_epoch, uint32_t examples) const {
  std::vector<std::vector<uint32_t>> uses(epochs_.size(), std::vector<uint32_t>(examples, 0));
  for (const auto& [step, by_worker] : ledger_) {
    const uint64_t epoch = step / steps_per_epoch;
    if (epoch >= uses.size()) continue;
    for (const auto& [worker, indices] : by_worker) {
      for (uint32_t i : indices) ++uses[epoch][i];
    }
  }
  const uint64_t audited_from = ledger_.empty() ? 0 : ledger_.begin()->first;
  for (size_t e = 0; e < uses.size(); ++e) {
    if (e * steps_per_epoch < audited_from) {
      std::printf("examples of epoch %zu: not audited (trained before a coordinator restart)\n", e + 1);
      continue;
    }
    uint64_t once = 0, missing = 0, repeated = 0;
    for (uint32_t n : uses[e]) {
      once += n == 1;
      missing += n == 0;
      repeated += n > 1;
    }
    std::printf("examples of epoch %zu: %llu used once, %llu missing, %llu used more than once\n", e + 1,
                static_cast<unsigned long long>(once), static_cast<unsigned long long>(missing),
                static_cast<unsigned long long>(repeated));
  }
  std::fflush(stdout);
}

}  // namespace pstrain
