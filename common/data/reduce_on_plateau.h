// A learning rate reduced when an epoch metric stops improving (the job spec's
// `reduce_on_plateau`), Keras' ReduceLROnPlateau callback (keras.callbacks.ReduceLROnPlateau,
// Keras 3) applied to a job's recorded epochs:
//
//   lr = the optimizer's learning_rate; best = +inf (min) or -inf (max); wait = cooldown_left = 0
//   after each epoch e (0-based) with a monitored value v (epochs without one are skipped):
//     if cooldown_left > 0: cooldown_left -= 1, wait = 0
//     if v improves on best (min: v < best - min_delta; max: v > best + min_delta): best = v, wait = 0
//     else if cooldown_left == 0:
//       wait += 1
//       if wait >= patience and lr > min_lr: lr = max(lr * factor, min_lr) (as float32),
//                                             cooldown_left = cooldown, wait = 0
//   epoch e + 1 trains with lr.
//
// The service applies it as a multiplier of the optimizer's rate (`lr_scale`, optimizer.h):
// epoch e's scale is float(lr_e / learning_rate), so its rate is learning_rate * scale, within a
// float rounding of Keras' lr_e. Like early stopping, it is a pure function of the recorded
// epochs' figures, which in sync training are the same bit for bit whatever the worker count and
// faults: every worker and the standalone trainer use the same scale in every epoch.
//
// Thread rules: pure functions.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace pstrain {

struct ReduceOnPlateauSpec {
  bool enabled = false;
  std::string monitor;  // an epoch metric (early_stopping_metrics()); default as early stopping's
  bool maximize = false;
  bool mode_auto = true;
  double factor = 0.1;      // in (0, 1)
  int64_t patience = 10;    // Keras' defaults
  double min_delta = 1e-4;
  int64_t cooldown = 0;
  double min_lr = 0;
};

// The learning-rate scale of epochs 0 .. values.size() (values[e]: epoch e's monitored figure,
// nullopt when it has none): scales[0] is 1, scales[e + 1] follows epoch e.
std::vector<float> plateau_lr_scales(const ReduceOnPlateauSpec& spec, float learning_rate,
                                     const std::vector<std::optional<double>>& values);

}  // namespace pstrain
