// Early stopping (the job spec's `early_stopping`), Keras' EarlyStopping callback
// (keras.callbacks.EarlyStopping, Keras 3) applied to a job's recorded epochs:
//
//   for each epoch e (0-based) in order, with v its monitored value:
//     skip it when v is missing or e < start_from_epoch
//     wait += 1
//     if v improves on best (min: v + min_delta < best; max: v - min_delta > best; nothing yet: yes):
//       best = v, best_epoch = e; wait = 0 unless a baseline is set and v does not improve on it
//     else if wait >= patience and e > 0: stop after epoch e
//
// The decision is a pure function of the epochs' figures, which in sync training are the same bit
// for bit however many workers run and whatever faults happen, so a job stops at the same epoch,
// with the same model, in every such run. It is computed again from the stored history after a
// recovery or a coordinator restart rather than kept as state.
//
// Where the service differs from Keras (docs/JOB-SPEC.md "early_stopping"): with `restore_best`
// the job's model is the best epoch's whether or not training stopped early (Keras restores only
// when it stops), because a user who asks for the best epoch wants it either way.
//
// Thread rules: pure functions.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace pstrain {

struct EarlyStoppingSpec {
  bool enabled = false;
  // An epoch metric (early_stopping_metrics()); the parser's default: val_loss with a validation
  // hold-out, else test_loss.
  std::string monitor = "test_loss";
  bool maximize = false;              // mode "max" (auto: accuracies, AUC and R^2), else "min"
  bool mode_auto = true;              // mode was "auto" (written back as such)
  double min_delta = 0;               // >= 0
  int64_t patience = 0;               // epochs without improvement before stopping
  std::optional<double> baseline;
  int64_t start_from_epoch = 0;       // epochs before this one are not looked at (0-based)
  bool restore_best = false;          // the best epoch's checkpoint becomes the job's model
};

// The epoch metrics early stopping can monitor, as the job's epoch records name them.
const std::vector<std::string>& early_stopping_metrics();
// Keras' "auto": maximize accuracies, AUC and R^2; minimize losses and errors.
bool metric_is_maximized(std::string_view metric);

struct EarlyStoppingDecision {
  std::optional<int64_t> best_epoch;     // 0-based; nullopt: no epoch looked at yet
  std::optional<double> best;
  std::optional<int64_t> stopped_epoch;  // 0-based: training ends after this epoch
  int64_t wait = 0;                      // epochs since the last improvement
  // The epoch whose parameters are the job's model once it ends early: the best one with
  // restore_best, else the one it stopped after. nullopt while it has not stopped.
  std::optional<int64_t> model_epoch(const EarlyStoppingSpec& spec) const;
};

// The rule over epochs 0 .. values.size() - 1 (values[e]: epoch e's monitored figure, nullopt
// when it has none); stops at the first epoch that meets it.
EarlyStoppingDecision decide_early_stopping(const EarlyStoppingSpec& spec, const std::vector<std::optional<double>>& values);

}  // namespace pstrain
