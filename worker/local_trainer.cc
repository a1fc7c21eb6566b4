#include "worker/local_trainer.h"

#include <algorithm>
#include <chrono>
#include <cmath>

#include "common/engine/chunk_plan.h"
#include "common/engine/nn/gradient_clipping.h"
#include "common/engine/nn/moving_statistics.h"
#include "common/data/dataset.h"
#include "common/data/dataset_manifest.h"
#include "common/data/gather_ahead.h"
#include "common/data/table_split.h"
#include "common/data/reduce_on_plateau.h"
#include "common/data/validation_split.h"
#include "common/data/windowed_order.h"
#include "common/base/error.h"
#include "common/base/log.h"
#include "common/engine/nn/gradient_scaling.h"
#include "common/engine/nn/data_parallel_model.h"
#include "worker/precision.h"
#include "common/engine/nn/sparse_rows.h"
#include "common/engine/optim/optimizer.h"
#include "common/base/rng.h"
#include "worker/first_layer_groups.h"
#include "worker/local_compression.h"

namespace pstrain {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

struct Evaluation {
  double loss = 0, accuracy = 0;
  nn::RegressionSums regression;
  double top_k_accuracy = 0;
  nn::BinaryScores binary;
};

// The sparse tables' rows of a batch, read from the whole tables in `params`.
void point_sparse_rows(nn::DataParallelModel<float>& model, nn::SparseStep<float>& sparse, const float* inputs,
                       int64_t batch, const float* params) {
  if (sparse.empty()) return;
  sparse.collect(inputs, model.input_size(), batch);
  for (size_t t = 0; t < sparse.tables().size(); ++t) sparse.point_into(t, model.layout(), params);
  model.use_sparse_rows(sparse.rows());
}

// Sparse tables are read whole from `params` (inference's own path: no rows given).
Evaluation evaluate(nn::DataParallelModel<float>& model, const Split& split, const float* params) {
  model.use_sparse_rows({});
  const uint32_t batch = static_cast<uint32_t>(model.max_batch());
  std::vector<uint32_t> indices;
  const auto block = [&](uint32_t start) {  // the ids of the batch from `start`
    indices.resize(std::min(batch, split.size - start));
    for (uint32_t i = 0; i < indices.size(); ++i) indices[i] = start + i;
    return std::span<const uint32_t>(indices);
  };
  nn::LossResult total;
  if (split.size == 0) return {};
  GatherAhead reader(split, batch);  // the next batch is read while this one is evaluated
  reader.start(block(0));
  for (uint32_t start = 0; start < split.size; start += batch) {
    const GatherAhead::Batch b = reader.take();
    if (split.size - start > batch) reader.start(block(start + batch));
    total += model.evaluate(params, b.inputs, b.targets, static_cast<int64_t>(b.ids.size()));
  }
  return {total.loss_sum / split.size, static_cast<double>(total.correct) / split.size, total.regression,
          static_cast<double>(total.top_k_correct) / split.size, total.binary};
}

// Throws Error unless `initial` fits: its parameters the layout's size, its optimizer slots those
// of `fresh` (the spec's optimizer's), its step inside the run.
void check_initial_state(const InitialState& initial, const optim::OptimizerState& fresh, size_t params,
                         uint32_t examples, int64_t total_steps, int64_t steps_per_epoch) {
  if (initial.params.size() != params) {
    throw Error("the initial parameters are " + std::to_string(initial.params.size()) + " floats; the model has " +
                std::to_string(params));
  }
  if (initial.optimizer) {
    const auto& slots = initial.optimizer->slots;
    bool fits = slots.size() == fresh.slots.size();
    for (size_t i = 0; fits && i < slots.size(); ++i) {
      fits = slots[i].name == fresh.slots[i].name && slots[i].values.size() == params;
    }
    if (!fits) {
      std::string want, have;
      for (const optim::Slot& s : fresh.slots) want += (want.empty() ? "" : ", ") + s.name;
      for (const optim::Slot& s : slots) have += (have.empty() ? "" : ", ") + s.name;
      throw Error("the initial optimizer state has slots [" + have + "]; the spec's optimizer has [" + want +
                  "] over " + std::to_string(params) + " parameters");
    }
  }
  if (initial.dataset_examples >= 0 && initial.dataset_examples != examples) {
    throw Error("the initial state was trained on " + std::to_string(initial.dataset_examples) +
                " training examples; this dataset has " + std::to_string(examples) +
                " (another data order: it cannot be resumed on)");
  }
  if (initial.step < 0) throw Error("the initial step is negative");
  if (initial.step >= total_steps) {
    throw Error("nothing to train: the initial state is at step " + std::to_string(initial.step) + " (epoch " +
                std::to_string(initial.step / steps_per_epoch) + ") and the spec's training ends at step " +
                std::to_string(total_steps) + " (" + std::to_string(total_steps / steps_per_epoch) +
                " epochs of " + std::to_string(steps_per_epoch) + " steps); training.epochs is the total");
  }
}

}  // namespace

std::optional<double> epoch_figure(const EpochReport& r, const std::string& name) {
  const bool regression = r.test_regression.has_value();
  if (name == "test_loss") return r.test_loss;
  if (name == "train_loss") return r.train_loss;
  if (name == "test_mae" && regression) return r.test_regression->mae();
  if (name == "test_rmse" && regression) return r.test_regression->rmse();
  if (name == "test_r2" && regression) return r.test_regression->r2();
  if (name == "test_auc") return r.test_auc;
  if (name == "test_top5_accuracy") return r.test_top5_accuracy;
  if (name.starts_with("val_")) {
    if (!r.validation) return std::nullopt;
    const EpochReport::Validation& v = *r.validation;
    const bool val_regression = v.regression.has_value();
    if (name == "val_loss") return v.loss;
    if (name == "val_mae" && val_regression) return v.regression->mae();
    if (name == "val_rmse" && val_regression) return v.regression->rmse();
    if (name == "val_r2" && val_regression) return v.regression->r2();
    if (name == "val_auc") return v.auc;
    if (name == "val_top5_accuracy") return v.top5_accuracy;
    if (name == "val_accuracy" && !val_regression) return v.accuracy;
    return std::nullopt;
  }
  if (name == "test_accuracy" && !regression) return r.test_accuracy;
  if (name == "train_accuracy" && !regression) return r.train_accuracy;
  return std::nullopt;
}

namespace {

// The learning-rate scale of the epoch after this run's epochs (spec reduce_on_plateau; 1 without).
float epoch_lr_scale(const JobSpec& spec, const TrainingResult& result) {
  if (!spec.reduce_on_plateau.enabled) return 1.0f;
  std::vector<std::optional<double>> values;
  for (const EpochReport& r : result.epochs) values.push_back(epoch_figure(r, spec.reduce_on_plateau.monitor));
  return plateau_lr_scales(spec.reduce_on_plateau, spec.optimizer.learning_rate, values).back();
}

// Early stopping (spec early_stopping) after an epoch of this run: the rule over its epochs; keeps
// the best epoch's parameters for restore_best; true when it says stop. At the end of the run,
// result.early_stopping has the decision (stopped_epoch: the last epoch when it did not stop but
// restore_best picks an earlier one).
bool early_stopping_says_stop(const JobSpec& spec, TrainingResult& result, std::vector<float>& best_params) {
  const EarlyStoppingSpec& rule = spec.early_stopping;
  if (!rule.enabled) return false;
  std::vector<std::optional<double>> values;
  for (const EpochReport& r : result.epochs) values.push_back(epoch_figure(r, rule.monitor));
  EarlyStoppingDecision d = decide_early_stopping(rule, values);
  const int64_t last = static_cast<int64_t>(values.size()) - 1;
  if (rule.restore_best && d.best_epoch == last) best_params.assign(result.params.begin(), result.params.end());
  const bool stop = d.stopped_epoch.has_value();
  if (!stop && rule.restore_best && d.best_epoch && *d.best_epoch < last) d.stopped_epoch = last;  // if the run ends here
  if (stop || (rule.restore_best && d.best_epoch && *d.best_epoch < last)) {
    result.early_stopping = d;
  } else {
    result.early_stopping.reset();
  }
  return stop;
}

}  // namespace

TrainingResult train_locally(const JobSpec& submitted, const LocalTrainerOptions& options) {
  JobSpec spec = submitted;  // with training.class_weight resolved below
  const SplitLoader load = options.load_split ? options.load_split : [&](const std::string& name, SplitKind kind) {
    return load_any_split(options.data_dir, name, kind);
  };
  Split train = load(spec.dataset.name, SplitKind::kTrain);
  Split test_storage = load(spec.dataset.name, SplitKind::kTest);
  std::optional<Split> validation;  // training.validation_fraction's hold-out; train is the rest
  if (spec.training.validation_fraction > 0) {
    HeldOut held = hold_out_validation(train, spec.training.validation_fraction, spec.dataset.shuffle_seed);
    train = std::move(held.train);
    validation = std::move(held.validation);
  }
  // Class weights: on the examples trained on, before a table's preprocessing (its class names),
  // as the coordinator resolves them (class_weight.h).
  if (spec.training.class_weight.kind != ClassWeightSpec::Kind::kNone) {
    spec.loss.class_weights = resolve_class_weights(spec.training.class_weight, spec.loss, train);
    spec.training.class_weight = ClassWeightSpec{ClassWeightSpec::Kind::kList, {}, spec.loss.class_weights};
  }
  std::shared_ptr<const FittedPreprocessing> preprocessing;
  if (train.table || train.documents) {
    // A table (or documents): fitted on the training part, applied to every split (as the cluster's data service does).
    const PreparedTable prepared = prepare_table(spec.preprocessing, train, validation ? &*validation : nullptr, test_storage);
    preprocessing = prepared.fitted;
    train = *prepared.train;
    if (validation) validation = *prepared.validation;
    test_storage = *prepared.test;
  } else if (spec.preprocessing.given) {
    throw SpecError("/preprocessing", "applies to a table (a CSV upload); " + spec.dataset.name + " holds arrays or images");
  }
  const Split& test = test_storage;
  check_spec_against_dataset(spec, train);  // the files may disagree with the dataset table
  check_spec_against_dataset(spec, test);

  const int64_t batch = spec.training.global_batch_size;
  nn::DataParallelModel<float> model(spec.model, batch, options.replicas, spec.loss);
  if (const std::string precision = apply_precision(spec.precision, model); !precision.empty()) {
    PSLOG(kInfo) << precision;
  }
  const ParamLayout& layout = model.layout();
  // training.compression: each slice's gradient as the servers decode its worker's pushes.
  LocalCompression compression(spec.training.compression, spec.model.seed, layout, options.servers, options.replicas);
  if (compression.active()) {
    model.set_on_slice_gradient([&compression](int slice, float* g) { compression.decode_as_pushed(slice, g); });
    PSLOG(kInfo) << "compression " << compression_kind_name(spec.training.compression.kind) << ": each of "
                 << options.replicas << " slice(s) as its worker's pushes decode, chunks of "
                 << std::max<uint32_t>(options.servers, 1) << " server(s)";
  }
  if (options.servers > 0) group_first_layer_by_server(model, plan_chunks(layout, options.servers), options.servers);
  // Clipping's norms are summed as a cluster of `servers` servers (one when 0) holds the gradient.
  const std::vector<ChunkInfo> clip_chunks =
      spec.optimizer.clips() ? plan_chunks(layout, std::max<uint32_t>(options.servers, 1)) : std::vector<ChunkInfo>{};
  TrainingResult result;
  result.params.resize(layout.total_size());
  // Sparse tables' gradients are compact (sparse_rows.h): the flat gradient holds them only for
  // the dense update semantics, which scatters them into it.
  nn::SparseStep<float> sparse(model.sparse_tables());
  const bool lazy = spec.optimizer.sparse_updates == OptimizerSpec::SparseUpdates::kLazy;
  AlignedFloats grads(lazy ? layout.dense_size() : layout.total_size());
  std::vector<optim::Optimizer::TableRows> table_rows;
  // batch_norm's moving statistics: set as moving averages after each update (moving_statistics.h).
  struct Moving {
    size_t offset, size;
    float momentum;
  };
  std::vector<Moving> moving;
  for (const ParamInfo& p : layout.params()) {
    if (nn::is_moving_statistic(p.role)) moving.push_back({p.offset, p.size, nn::moving_momentum(spec.model, p)});
  }
  std::vector<float> moving_before;
  // The step's tail in one pass (DESIGN-NOTES): the replicas' gradient sum and the scaling run
  // inside the update, block by block, with the bits of separate passes. Not with clipping (its
  // norm needs the whole scaled gradient first) or sparse tables (their rows update apart).
  const bool fused_tail = sparse.empty() && !spec.optimizer.clips();
  model.leave_sum_to_caller(fused_tail);
  const auto optimizer = optim::make_optimizer(spec.optimizer);
  optim::OptimizerState& state = result.optimizer;
  state = optimizer->make_state(layout.total_size());

  GatherAhead reader(train, static_cast<size_t>(batch));  // the next step's batch is read during this one
  const int64_t steps_per_epoch = (train.size + batch - 1) / batch;
  const int64_t total_steps = steps_per_epoch * spec.training.epochs;

  int64_t global_step = 0;
  if (options.initial == nullptr) {
    glorot_uniform_init(layout, spec.model.seed, result.params.data());
  } else {
    check_initial_state(*options.initial, state, layout.total_size(), train.size, total_steps, steps_per_epoch);
    std::copy(options.initial->params.begin(), options.initial->params.end(), result.params.begin());
    if (options.initial->optimizer) state = *options.initial->optimizer;
    global_step = options.initial->step;
  }
  std::vector<float> best_params;  // early stopping's restore_best: the best epoch's
  const int64_t end_step =
      options.max_steps >= 0 ? std::min(total_steps, global_step + options.max_steps) : total_steps;
  const auto checkpoint = [&](bool final) {
    options.on_checkpoint({global_step, steps_per_epoch, static_cast<int64_t>(train.size), final,
                           std::span<const float>(result.params.data(), result.params.size()), &state,
                           preprocessing.get(), train.dtype});
  };

  for (int64_t epoch = global_step / steps_per_epoch; epoch < spec.training.epochs && global_step < end_step; ++epoch) {
    // The epoch's order, as the cluster's plan walks it (common/data/data_plan.h).
    WindowedOrder order(train.size, spec.dataset.shuffle_seed, static_cast<uint32_t>(epoch), spec.dataset.shuffle_window);
    std::vector<uint32_t> ids;
    double loss_sum = 0;
    int64_t correct = 0, seen = 0;
    double train_seconds = 0;
    auto last_progress = Clock::now();
    const auto step_ids = [&](int64_t step) {  // the examples of the epoch's `step`
      const int64_t first = step * batch;
      order.skip(static_cast<uint64_t>(first) - order.position());  // a resumed epoch starts mid-way
      ids.resize(static_cast<size_t>(std::min<int64_t>(batch, train.size - first)));
      for (uint32_t& id : ids) id = order.next();
      return std::span<const uint32_t>(ids);
    };
    int64_t step = global_step - epoch * steps_per_epoch;
    if (step < steps_per_epoch && global_step < end_step) reader.start(step_ids(step));
    const float lr_scale = epoch_lr_scale(spec, result);
    for (; step < steps_per_epoch && global_step < end_step; ++step) {
      const auto step_start = Clock::now();
      const GatherAhead::Batch b = reader.take();
      if (step + 1 < steps_per_epoch && global_step + 1 < end_step) reader.start(step_ids(step + 1));
      const int64_t n = static_cast<int64_t>(b.ids.size());
      // Dropout's keys: the epoch and the examples' indices in the split, as a cluster's batches carry them.
      const nn::ExampleKeys keys{static_cast<uint32_t>(epoch), b.ids.data()};
      point_sparse_rows(model, sparse, b.inputs, n, result.params.data());
      const float* values = compression.values_for_step(result.params.data(), layout.dense_size(), result.params.size());
      const nn::LossResult r = model.compute_gradients(values, b.inputs, b.targets, n, grads.data(), {}, nullptr, keys);
      if (!std::isfinite(r.loss_sum)) {
        throw Error("loss became " + std::to_string(r.loss_sum) + " at epoch " + std::to_string(epoch + 1) +
                    " step " + std::to_string(step + 1));
      }
      if (!fused_tail) {
        nn::scale_and_regularize(layout, grads.data(), result.params.data(), n);
        if (spec.optimizer.clips()) nn::clip_gradient(spec.optimizer, layout, clip_chunks, grads.data());
      }
      moving_before.clear();
      for (const Moving& m : moving) {
        moving_before.insert(moving_before.end(), result.params.data() + m.offset, result.params.data() + m.offset + m.size);
      }
      if (fused_tail) {  // the replicas' sum and the scaling, block by block inside the update
        optimizer->apply(result.params, grads, state, result.params, lr_scale, [&](int64_t from, int64_t to) {
          const auto begin = static_cast<size_t>(from), end = static_cast<size_t>(to);
          model.sum_into(grads.data(), begin, end);
          nn::scale_and_regularize(layout, grads.data(), result.params.data(), n, begin, end);
        });
      } else if (sparse.empty()) {
        optimizer->apply(result.params, grads, state, result.params, lr_scale);
      } else {
        table_rows.clear();
        for (size_t t = 0; t < sparse.tables().size(); ++t) {
          const std::span<float> g = sparse.grads(t);
          nn::scale_and_regularize(g.data(), g.data(), g.size(), n, 0.0f);
          const ParamInfo& p = layout.params()[sparse.tables()[t].param];
          table_rows.push_back({p.offset, p.size, static_cast<size_t>(p.shape[1]), sparse.ids(t), g});
        }
        if (lazy) {
          optimizer->apply_with_tables(result.params, layout.dense_size(), grads, table_rows, state, lr_scale);
        } else {  // every row every step: the rows' gradients scattered into zeros
          for (const optim::Optimizer::TableRows& t : table_rows) {
            std::fill_n(grads.data() + t.offset, t.size, 0.0f);
            for (size_t k = 0; k < t.rows.size(); ++k) {
              std::copy_n(t.grads.data() + k * t.dim, t.dim, grads.data() + t.offset + size_t{t.rows[k]} * t.dim);
            }
          }
          optimizer->apply(result.params, grads, state, result.params, lr_scale);
        }
      }
      for (size_t k = 0, at = 0; k < moving.size(); at += moving[k].size, ++k) {
        nn::moving_average(moving_before.data() + at, grads.data() + moving[k].offset, moving[k].size,
                           moving[k].momentum, result.params.data() + moving[k].offset);
      }
      train_seconds += seconds_since(step_start);
      loss_sum += r.loss_sum;
      correct += r.correct;
      seen += n;
      ++result.steps;
      ++global_step;
      if (options.on_progress && seconds_since(last_progress) >= 1.0) {
        last_progress = Clock::now();
        options.on_progress({epoch + 1, step + 1, steps_per_epoch, global_step, loss_sum / seen,
                             static_cast<double>(correct) / seen, seen / train_seconds});
      }
      if (options.on_checkpoint && options.checkpoint_every > 0 && global_step % options.checkpoint_every == 0 &&
          global_step < end_step) {
        checkpoint(false);
      }
    }
    if (seen == 0) break;
    EpochReport report;
    report.epoch = epoch + 1;
    report.train_loss = loss_sum / seen + nn::regularization_loss(layout, result.params.data());
    report.train_accuracy = static_cast<double>(correct) / seen;
    report.samples_per_second = seen / train_seconds;
    report.seconds = train_seconds;
    report.lr_scale = lr_scale;
    // What the workers evaluate on: the values they hold (with fp16, rounded to half).
    const float* values = compression.values_for_step(result.params.data(), layout.dense_size(), result.params.size());
    const Evaluation eval = evaluate(model, test, values);
    report.test_loss = eval.loss;
    report.test_accuracy = eval.accuracy;
    if (is_regression(spec.loss)) report.test_regression = eval.regression;
    if (spec.loss.type == LossType::kBinaryCrossEntropy) report.test_auc = eval.binary.auc();
    if (!is_regression(spec.loss) && model.output_size() > nn::kTopK) report.test_top5_accuracy = eval.top_k_accuracy;
    if (validation) {
      const Evaluation val = evaluate(model, *validation, values);
      EpochReport::Validation& v = report.validation.emplace();
      v.loss = val.loss;
      v.accuracy = val.accuracy;
      if (is_regression(spec.loss)) v.regression = val.regression;
      if (spec.loss.type == LossType::kBinaryCrossEntropy) v.auc = val.binary.auc();
      if (!is_regression(spec.loss) && model.output_size() > nn::kTopK) v.top5_accuracy = val.top_k_accuracy;
    }
    result.epochs.push_back(report);
    if (options.on_epoch) options.on_epoch(report);
    if (early_stopping_says_stop(spec, result, best_params)) break;
  }
  if (result.early_stopping && result.early_stopping->model_epoch(spec.early_stopping) != result.early_stopping->stopped_epoch) {
    std::copy(best_params.begin(), best_params.end(), result.params.begin());  // restore_best
  }
  result.final_step = global_step;
  if (options.on_checkpoint && result.steps > 0) checkpoint(true);
  return result;
}

}  // namespace pstrain
