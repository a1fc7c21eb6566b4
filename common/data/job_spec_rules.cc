// The job spec's rules across its sections, applied once every section is read
// (parse_accepted_job_spec): defaults that depend on another section, and combinations refused
// with a SpecError naming the field.
#include "common/data/job_spec.h"

#include <string>

#include "common/base/error.h"
#include "common/data/spec_reader.h"

namespace pstrain::spec_json {

namespace {

// What early stopping and the plateau rule (`path`) share: the monitor's default (val_loss with a
// hold-out, else test_loss) and auto mode, and, when the rule is on, a hold-out for a val_*
// monitor and sync training (an async job's epochs do not end at one step). Returns `enabled`.
bool resolve_epoch_rule(const JobSpec& spec, const std::string& path, bool enabled, std::string& monitor,
                        bool mode_auto, bool& maximize) {
  if (monitor.empty()) monitor = spec.training.validation_fraction > 0 ? "val_loss" : "test_loss";
  if (mode_auto) maximize = metric_is_maximized(monitor);
  if (!enabled) return false;
  if (monitor.starts_with("val_") && spec.training.validation_fraction <= 0) {
    throw SpecError(path + "/monitor", monitor + " needs a validation hold-out: /training/validation_fraction");
  }
  if (spec.training.mode != TrainingMode::kSync) {
    throw SpecError(path, "applies to sync training (an async job's epochs do not end at one step)");
  }
  return true;
}

}  // namespace

// Early stopping needs a checkpoint at every epoch end (the model it ends with is one): backups
// at epoch ends unless the spec says otherwise, and not otherwise.
void resolve_early_stopping(JobSpec& spec) {
  EarlyStoppingSpec& e = spec.early_stopping;
  if (!resolve_epoch_rule(spec, "/early_stopping", e.enabled, e.monitor, e.mode_auto, e.maximize)) return;
  if (spec.backup.frequency == BackupSpec::Frequency::kSteps) {
    throw SpecError("/backup/save_freq", "must be \"epoch\" with early_stopping (its model is an epoch end's checkpoint)");
  }
  if (spec.checkpoint.keep == 0) {
    throw SpecError("/checkpoint/keep", "must be at least 1 with early_stopping (its model is an epoch end's checkpoint)");
  }
  spec.backup.frequency = BackupSpec::Frequency::kEpoch;
}

// batch_norm's ghost batches (common/engine/nn/batch_norm.h): by default the global batch over
// the workers, written into the spec; each worker's share of a full batch must split into whole
// ghost batches, so that no ghost batch spans two workers.
void resolve_ghost_batches(JobSpec& spec) {
  const int64_t batch = spec.training.global_batch_size, workers = spec.training.workers;
  for (size_t i = 0; i < spec.model.layers.size(); ++i) {
    LayerSpec& layer = spec.model.layers[i];
    if (layer.type != LayerType::kBatchNorm) continue;
    const std::string path = "/model/layers/" + std::to_string(i) + "/virtual_batch_size";
    if (batch % workers != 0) {
      throw SpecError(path, "batch_norm needs the global batch (" + std::to_string(batch) + ") to split evenly over the " +
                                std::to_string(workers) + " workers, so that its ghost batches are the same however "
                                "many workers share a step");
    }
    const int64_t share = batch / workers;
    if (layer.virtual_batch_size == 0) layer.virtual_batch_size = share;
    if (share % layer.virtual_batch_size != 0) {
      throw SpecError(path, std::to_string(layer.virtual_batch_size) + " does not divide each worker's " +
                                std::to_string(share) + " examples (the global batch " + std::to_string(batch) +
                                " over " + std::to_string(workers) + " workers) into whole ghost batches");
    }
  }
}

// The plateau rule's monitor as early stopping's; it changes the rate of sync epochs (the whole
// job's next epoch starts at one step), and multiplies a constant rate (Keras refuses a schedule).
void resolve_reduce_on_plateau(JobSpec& spec) {
  ReduceOnPlateauSpec& p = spec.reduce_on_plateau;
  if (!resolve_epoch_rule(spec, "/reduce_on_plateau", p.enabled, p.monitor, p.mode_auto, p.maximize)) return;
  if (spec.optimizer.schedule.kind != LearningRateSchedule::Kind::kConstant) {
    throw SpecError("/reduce_on_plateau", "needs a constant /optimizer/learning_rate, not a schedule (as Keras)");
  }
  // A resumed job starts mid-run without the source job's epochs, which the rule's standing
  // comes from.
  if (spec.init_from.source != InitFromSpec::Source::kNone && spec.init_from.optimizer_state) {
    throw SpecError("/reduce_on_plateau", "cannot resume a run (init_from with optimizer_state): the rule would need "
                                          "the source job's epochs; fine-tuning (without optimizer_state) starts afresh");
  }
}

// Clipping needs the step's whole gradient before any server applies it: built for sync jobs
// whose tensors travel whole (docs/DESIGN-NOTES.md "Gradient clipping").
void check_gradient_clipping(const JobSpec& spec) {
  if (!spec.optimizer.clips()) return;
  const std::string field = spec.optimizer.clipnorm > 0.0f ? "/optimizer/clipnorm" : "/optimizer/global_clipnorm";
  if (spec.training.mode == TrainingMode::kAsync) throw SpecError(field, "applies to sync training only (not built for async)");
  if (spec.training.backup_workers > 0) throw SpecError(field, "cannot be combined with /training/backup_workers");
  if (spec.training.compression.kind != CompressionKind::kNone) {
    throw SpecError(field, "cannot be combined with /training/compression");
  }
  for (size_t i = 0; i < spec.model.layers.size(); ++i) {
    if (spec.model.layers[i].type == LayerType::kEmbedding && spec.model.layers[i].sparse) {
      throw SpecError(field, "cannot be combined with a sparse embedding table (layer " + std::to_string(i) + ")");
    }
  }
}

}  // namespace pstrain::spec_json
