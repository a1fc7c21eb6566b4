// The divergence guard (issue 19, DESIGN-NOTES "Divergence guard"): what a job's figures say about
// whether its training has gone wrong, as warnings with the figures. Pure: the JobRunner feeds it
// the training loss of each progress report and the figures of each epoch as recorded, and acts on
// what it returns (a warning in the job's record, an event, a counter; a failure with
// training.on_divergence "fail").
//
// The rules:
// - loss_not_finite: a worker's training loss became NaN or infinite (the worker fails its job;
//   always a failure, whatever on_divergence says, as before the guard existed);
// - loss_above_start: every training loss reported during an epoch (each worker's window of
//   metrics_every_steps steps) stayed above the job's starting loss (the first window reported in
//   epoch 1); from epoch 2 on, since epoch 1 holds the starting window itself;
// - chance_accuracy: an epoch's test accuracy is at most 1/classes + min(0.05, 0.5/classes) (0.15
//   for 10 classes, 0.55 for 2): a model that learnt nothing, or blew up and predicts one class.
//
// Thread rules: none (a value type, used on the event-loop thread by its JobRunner).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace pstrain {

enum class DivergenceReason { kLossNotFinite, kLossAboveStart, kChanceAccuracy };
// "loss_not_finite", "loss_above_start", "chance_accuracy": the `reason` of warnings and metrics.
const char* divergence_reason_name(DivergenceReason reason);
inline constexpr DivergenceReason kDivergenceReasons[] = {
    DivergenceReason::kLossNotFinite, DivergenceReason::kLossAboveStart, DivergenceReason::kChanceAccuracy};

struct Divergence {
  DivergenceReason reason = DivergenceReason::kLossNotFinite;
  uint32_t epoch = 0;     // 1-based
  double value = 0;       // the figure: the epoch's lowest training loss, the test accuracy
  double threshold = 0;   // what it was compared with: the starting loss, the chance level + margin
  std::string detail;     // one sentence with the figures
};

// The chance level's threshold for `classes` classes: 1/classes + min(0.05, 0.5/classes).
double chance_accuracy_threshold(int64_t classes);

class DivergenceGuard {
 public:
  explicit DivergenceGuard(int64_t classes) : classes_(classes) {}

  // A progress report's mean training loss over its window, in epoch `epoch` (0-based).
  void train_window(uint32_t epoch, double loss);
  // The epoch's windows are being redone (a rollback): forgets their losses.
  void restart_epochs_from(uint32_t epoch);
  // Epoch `epoch` (0-based) was recorded with this test accuracy (nullopt: nothing evaluated).
  // Returns what it finds (each reason at most once per epoch).
  std::vector<Divergence> epoch_recorded(uint32_t epoch, std::optional<double> test_accuracy) const;
  // A worker's loss was not finite; `message` is its report (with the figures).
  static Divergence loss_not_finite(uint32_t epoch, const std::string& message);

  std::optional<double> starting_loss() const { return start_; }

 private:
  int64_t classes_;
  std::optional<double> start_;
  std::vector<std::optional<double>> lowest_;  // by epoch: the lowest window loss reported
};

}  // namespace pstrain
