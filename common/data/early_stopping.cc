#include "common/data/early_stopping.h"

namespace pstrain {

const std::vector<std::string>& early_stopping_metrics() {
  static const std::vector<std::string> names = {
      "test_loss", "test_accuracy", "train_loss", "train_accuracy", "test_mae", "test_rmse", "test_r2", "test_auc",
      "test_top5_accuracy", "val_loss", "val_accuracy", "val_mae", "val_rmse", "val_r2", "val_auc",
      "val_top5_accuracy"};
  return names;
}

bool metric_is_maximized(std::string_view metric) {
  const auto ends_with = [&](std::string_view tail) {
    return metric.size() >= tail.size() && metric.substr(metric.size() - tail.size()) == tail;
  };
  return metric.find("accuracy") != std::string_view::npos || ends_with("_auc") || ends_with("_r2");
}

std::optional<int64_t> EarlyStoppingDecision::model_epoch(const EarlyStoppingSpec& spec) const {
  if (!stopped_epoch) return std::nullopt;
  if (spec.restore_best && best_epoch) return best_epoch;
  return stopped_epoch;
}

namespace {

bool improves(const EarlyStoppingSpec& spec, double value, std::optional<double> reference) {
  if (!reference) return true;
  return spec.maximize ? value - spec.min_delta > *reference : value + spec.min_delta < *reference;
}

}  // namespace

EarlyStoppingDecision decide_early_stopping(const EarlyStoppingSpec& spec, const std::vector<std::optional<double>>& values) {
  EarlyStoppingDecision d;
  if (!spec.enabled) return d;
  for (size_t i = 0; i < values.size(); ++i) {
    const int64_t epoch = static_cast<int64_t>(i);
    if (!values[i] || epoch < spec.start_from_epoch) continue;
    const double v = *values[i];
    ++d.wait;
    if (improves(spec, v, d.best)) {
      d.best = v;
      d.best_epoch = epoch;
      if (!spec.baseline || improves(spec, v, spec.baseline)) d.wait = 0;
      continue;
    }
    if (d.wait >= spec.patience && epoch > 0) {
      d.stopped_epoch = epoch;
      break;
    }
  }
  return d;
}

}  // namespace pstrain
