#include "coordinator/job/divergence_guard.h"

#include <algorithm>
#include <cstdio>

namespace pstrain {

const char* divergence_reason_name(DivergenceReason reason) {
  switch (reason) {
    case DivergenceReason::kLossNotFinite: return "loss_not_finite";
    case DivergenceReason::kLossAboveStart: return "loss_above_start";
    case DivergenceReason::kChanceAccuracy: return "chance_accuracy";
  }
  return "?";
}

double chance_accuracy_threshold(int64_t classes) {
  const double chance = 1.0 / static_cast<double>(std::max<int64_t>(classes, 1));
  return chance + std::min(0.05, 0.5 * chance);
}

void DivergenceGuard::train_window(uint32_t epoch, double loss) {
  if (!start_) start_ = loss;
  if (lowest_.size() <= epoch) lowest_.resize(epoch + 1);
  auto& lowest = lowest_[epoch];
  lowest = lowest ? std::min(*lowest, loss) : loss;
}

void DivergenceGuard::restart_epochs_from(uint32_t epoch) {
  if (lowest_.size() > epoch) lowest_.resize(epoch);
}

std::vector<Divergence> DivergenceGuard::epoch_recorded(uint32_t epoch, std::optional<double> test_accuracy) const {
  std::vector<Divergence> found;
  char text[256];
  if (epoch >= 1 && start_ && epoch < lowest_.size() && lowest_[epoch] && *lowest_[epoch] > *start_) {
    std::snprintf(text, sizeof text,
                  "epoch %u: the training loss stayed above its starting value %.4g for the whole epoch (lowest %.4g)",
                  epoch + 1, *start_, *lowest_[epoch]);
    found.push_back({DivergenceReason::kLossAboveStart, epoch + 1, *lowest_[epoch], *start_, text});
  }
  const double threshold = chance_accuracy_threshold(classes_);
  if (test_accuracy && *test_accuracy <= threshold) {
    std::snprintf(text, sizeof text,
                  "epoch %u: test accuracy %.4f is at chance level (%lld classes: chance %.4f, warned at <= %.4f)",
                  epoch + 1, *test_accuracy, static_cast<long long>(classes_), 1.0 / std::max<int64_t>(classes_, 1),
                  threshold);
    found.push_back({DivergenceReason::kChanceAccuracy, epoch + 1, *test_accuracy, threshold, text});
  }
  return found;
}

Divergence DivergenceGuard::loss_not_finite(uint32_t epoch, const std::string& message) {
  return {DivergenceReason::kLossNotFinite, epoch + 1, 0, 0, message};
}

}  // namespace pstrain
