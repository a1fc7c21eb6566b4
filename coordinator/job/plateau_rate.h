// A job's learning rate under `reduce_on_plateau` (common/data/reduce_on_plateau.h for the rule):
// what each epoch's multiplier is, for the workers, which ask before the epoch's first step.
//
// Epoch e's multiplier follows from the figures of epochs 0 .. e-1, so a worker asking for it
// waits until epoch e-1 is recorded (every worker has evaluated it): one wait per epoch, for the
// slowest evaluation. Like early stopping's, the answer is computed from the job's recorded epochs
// each time (the newest record of each epoch), never kept as state: after a rollback, a recovery
// or a coordinator restart it is the same, and in sync training the figures, and so the
// multipliers, are the same bit for bit whatever the worker count and faults.
//
// Thread rules: event-loop thread only. Refers to the job's JobContext, which outlives it.
#pragma once

#include <kj/async.h>

#include <cstdint>
#include <map>
#include <optional>

#include "coordinator/job/job_context.h"

namespace pstrain {

class PlateauRate {
 public:
  explicit PlateauRate(JobContext& job) : job_(job) {}

  bool enabled() const { return job_.spec.reduce_on_plateau.enabled; }
  // Epoch `epoch`'s (0-based) learning-rate multiplier, once epoch - 1 is recorded (at once for
  // epoch 0 and when the rule is off).
  kj::Promise<float> scale_for(uint32_t epoch);
  // After an epoch is recorded: answers the workers waiting for the next one, and logs a change.
  void epoch_recorded();
  // Early stopping ended the job: no further epoch will be recorded, so every wait, now and
  // later, ends with the last multiplier (the steps it is used in are never part of the model).
  void release_all();

 private:
  // Epoch `epoch`'s multiplier if epoch - 1 is recorded.
  std::optional<float> known_scale(uint32_t epoch) const;
  // `scale`, epoch `epoch`'s, logged when it differs from the last one logged.
  float answer(uint32_t epoch, float scale);

  JobContext& job_;
  std::multimap<uint32_t, kj::Own<kj::PromiseFulfiller<float>>> waiting_;  // by epoch
  float logged_ = 1.0f;  // the last multiplier logged
  bool released_ = false;
};

}  // namespace pstrain
