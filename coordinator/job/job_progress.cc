#include "coordinator/job/job_progress.h"

#include <algorithm>
#include <cstdio>
#include <limits>

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

EvaluationSums& EvaluationSums::operator+=(const EvaluationSums& other) {
  loss_sum += other.loss_sum;
  correct += other.correct;
  examples += other.examples;
  top_k_correct += other.top_k_correct;
  if (other.regression) {
    if (!regression) regression.emplace();
    *regression += *other.regression;
  }
  if (other.binary) {
    if (!binary) binary.emplace();
    *binary += *other.binary;
  }
  reports += other.reports;
  return *this;
}

void JobProgress::add_evaluation(uint32_t epoch, bool validation, const EvaluationSums& sums, double rate,
                                 size_t workers) {
  EpochMetrics& m = epochs_[epoch];
  (validation ? m.validation : m.test) += sums;
  if (!validation) m.samples_per_second += rate;
  if (m.test.reports >= workers && (!validation_ || m.validation.reports >= workers)) record_epoch(epoch, false);
}

namespace {

// A split's figures from its sums: loss and accuracy (0 when nothing was evaluated), the
// regression figures, top-5 accuracy (more than 5 classes), AUC (binary).
struct Figures {
  double loss = 0, accuracy = 0;
  std::optional<double> mae, rmse, r2, top5, auc;
};

Figures figures_of(const EvaluationSums& s, int64_t classes) {
  const double n = static_cast<double>(std::max<uint64_t>(1, s.examples));
  Figures f;
  f.loss = s.loss_sum / n;
  f.accuracy = static_cast<double>(s.correct) / n;
  if (s.examples > 0 && classes > nn::kTopK && !s.regression) f.top5 = static_cast<double>(s.top_k_correct) / n;
  if (s.binary) f.auc = s.binary->auc();
  if (s.regression) {
    f.mae = s.regression->mae();
    f.rmse = s.regression->rmse();
    f.r2 = s.regression->r2();
  }
  return f;
}

}  // namespace

void JobProgress::record_epoch(uint32_t epoch, bool partial) {
  EpochMetrics& m = epochs_[epoch];
  if (m.recorded || epoch >= record_limit_) return;
  m.recorded = true;
  const double train_n = static_cast<double>(std::max<uint64_t>(1, m.train_examples));
  const Figures test = figures_of(m.test, classes_);
  EpochMetric metric;
  metric.epoch = epoch + 1;
  if (m.train_examples > 0) {
    metric.train_loss = m.train_loss_sum / train_n;
    metric.train_accuracy = static_cast<double>(m.train_correct) / train_n;
  }
  metric.test_loss = test.loss;
  metric.test_accuracy = test.accuracy;
  metric.samples_per_second = m.samples_per_second;
  metric.time_ms = now_ms();
  metric.test_top5_accuracy = test.top5;
  metric.test_auc = test.auc;
  metric.test_mae = test.mae;
  metric.test_rmse = test.rmse;
  metric.test_r2 = test.r2;
  std::string val_line;
  if (m.validation.reports > 0) {
    const Figures val = figures_of(m.validation, classes_);
    metric.val_loss = val.loss;
    if (!val.mae) metric.val_accuracy = val.accuracy;
    metric.val_top5_accuracy = val.top5;
    metric.val_auc = val.auc;
    metric.val_mae = val.mae;
    metric.val_rmse = val.rmse;
    metric.val_r2 = val.r2;
    char line[96];
    if (val.mae) std::snprintf(line, sizeof line, " | val loss %.4f mae %.4f", val.loss, *val.mae);
    else std::snprintf(line, sizeof line, " | val loss %.4f accuracy %.4f", val.loss, val.accuracy);
    val_line = line;
  }
  const char* lost = partial ? " (test: part of the split, a worker was lost)" : "";
  // No step report reached this coordinator for the epoch (a restart at its end): nan, as no figure.
  const double nan = std::numeric_limits<double>::quiet_NaN();
  if (test.mae) {
    std::printf("epoch %u: train loss %.4f | test loss %.4f mae %.4f rmse %.4f r2 %.4f%s | %.0f samples/s%s\n", epoch + 1,
                metric.train_loss.value_or(nan), metric.test_loss, *test.mae, *test.rmse, *test.r2, val_line.c_str(),
                metric.samples_per_second, lost);
  } else {
    std::printf("epoch %u: train loss %.4f accuracy %.4f | test loss %.4f accuracy %.4f%s | %.0f samples/s%s\n",
                epoch + 1, metric.train_loss.value_or(nan), metric.train_accuracy.value_or(nan), metric.test_loss,
                metric.test_accuracy,
                val_line.c_str(), metric.samples_per_second, lost);
  }
  std::fflush(stdout);
  store_.append_epoch(job_id_, metric);
  // An epoch recorded late (a partial one, after a worker loss) joins the history but does not
  // replace the job's figures when a later epoch has them already.
  bool newest = true;
  for (size_t e = epoch + 1; e < epochs_.size(); ++e) newest = newest && !epochs_[e].recorded;
  store_.update(job_id_, [&](JobRecord& r) {
    if (newest) set_epoch_figures(r, metric);
    if (partial) {
      r.notes.push_back("epoch " + std::to_string(epoch + 1) + ": test metrics on " + std::to_string(m.test.examples) +
                        " examples (a worker was lost before evaluating its part)");
    }
  });
  if (epoch_recorded_) {
    // The chance-accuracy guard reads classification accuracy only.
    epoch_recorded_(epoch, m.test.examples > 0 && !m.test.regression ? std::optional<double>(metric.test_accuracy)
                                                                     : std::nullopt);
  }
}

void JobProgress::record_partial_epochs(uint32_t before) {
  for (uint32_t e = 0; e < before && e < epochs_.size(); ++e) {
    if (!epochs_[e].recorded && epochs_[e].test.reports > 0) record_epoch(e, true);
  }
}

double JobProgress::final_accuracy() const {
  const EpochMetrics& last = epochs_.back();
  return last.test.examples ? static_cast<double>(last.test.correct) / last.test.examples : 0.0;
}

}  // namespace pstrain
