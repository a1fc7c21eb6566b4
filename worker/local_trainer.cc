#include "worker/local_trainer.h"

#include <algorithm>
#include <chrono>
#include <cmath>

#include "common/chunk_plan.h"
#include "common/dataset.h"
#include "common/dataset_manifest.h"
#include "common/error.h"
#include "common/nn/gradient_scaling.h"
#include "common/nn/data_parallel_model.h"
#include "common/optim/optimizer.h"
#include "common/rng.h"
#include "worker/first_layer_groups.h"

namespace pstrain {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

struct Evaluation {
  double loss = 0, accuracy = 0;
};

Evaluation evaluate(nn::DataParallelModel<float>& model, const Split& split, const float* params, AlignedFloats& inputs,
                    std::vector<int32_t>& labels) {
  const int64_t batch = model.max_batch();
  std::vector<uint32_t> indices(static_cast<size_t>(batch));
  double loss = 0;
  int64_t correct = 0;
  for (uint32_t start = 0; start < split.size; start += static_cast<uint32_t>(batch)) {
    const uint32_t n = std::min<uint32_t>(static_cast<uint32_t>(batch), split.size - start);
    for (uint32_t i = 0; i < n; ++i) indices[i] = start + i;
    split.gather({indices.data(), n}, inputs.data(), labels.data());
    const nn::LossResult r = model.evaluate(params, inputs.data(), labels.data(), n);
    loss += r.loss_sum;
    correct += r.correct;
  }
  return {loss / split.size, static_cast<double>(correct) / split.size};
}

}  // namespace

TrainingResult train_locally(const JobSpec& spec, const LocalTrainerOptions& options) {
  const SplitLoader load = options.load_split ? options.load_split : [&](const std::string& name, SplitKind kind) {
    return load_any_split(options.data_dir, name, kind);
  };
  const Split train = load(spec.dataset.name, SplitKind::kTrain);
  const Split test = load(spec.dataset.name, SplitKind::kTest);
  check_spec_against_dataset(spec, train);  // the files may disagree with the dataset table
  check_spec_against_dataset(spec, test);

  const int64_t batch = spec.training.global_batch_size;
  nn::DataParallelModel<float> model(spec.model, batch, options.replicas);
  const ParamLayout& layout = model.layout();
  if (options.servers > 0) group_first_layer_by_server(model, plan_chunks(layout, options.servers), options.servers);
  TrainingResult result;
  result.params.resize(layout.total_size());
  glorot_uniform_init(layout, spec.model.seed, result.params.data());
  AlignedFloats grads(layout.total_size());
  const auto optimizer = optim::make_optimizer(spec.optimizer);
  optim::OptimizerState state = optimizer->make_state(layout.total_size());

  AlignedFloats inputs(static_cast<size_t>(model.input_size() * batch));
  std::vector<int32_t> labels(static_cast<size_t>(batch));
  const int64_t steps_per_epoch = (train.size + batch - 1) / batch;

  for (int64_t epoch = 0; epoch < spec.training.epochs; ++epoch) {
    const std::vector<uint32_t> order = epoch_order(train.size, spec.dataset.shuffle_seed, static_cast<uint32_t>(epoch));
    double loss_sum = 0;
    int64_t correct = 0, seen = 0;
    double train_seconds = 0;
    auto last_progress = Clock::now();
    int64_t step = 0;
    for (; step < steps_per_epoch; ++step) {
      if (options.max_steps >= 0 && result.steps >= options.max_steps) break;
      const auto step_start = Clock::now();
      const int64_t first = step * batch;
      const int64_t n = std::min<int64_t>(batch, train.size - first);
      train.gather({order.data() + first, static_cast<size_t>(n)}, inputs.data(), labels.data());
      const nn::LossResult r = model.compute_gradients(result.params.data(), inputs.data(), labels.data(), n, grads.data());
      if (!std::isfinite(r.loss_sum)) {
        throw Error("loss became " + std::to_string(r.loss_sum) + " at epoch " + std::to_string(epoch + 1) +
                    " step " + std::to_string(step + 1));
      }
      nn::scale_and_regularize(layout, grads.data(), result.params.data(), n);
      optimizer->apply(result.params, grads, state);
      train_seconds += seconds_since(step_start);
      loss_sum += r.loss_sum;
      correct += r.correct;
      seen += n;
      ++result.steps;
      if (options.on_progress && seconds_since(last_progress) >= 1.0) {
        last_progress = Clock::now();
        options.on_progress({epoch + 1, step + 1, steps_per_epoch, result.steps, loss_sum / seen,
                             static_cast<double>(correct) / seen, seen / train_seconds});
      }
    }
    if (seen == 0) break;
    EpochReport report;
    report.epoch = epoch + 1;
    report.train_loss = loss_sum / seen + nn::regularization_loss(layout, result.params.data());
    report.train_accuracy = static_cast<double>(correct) / seen;
    report.samples_per_second = seen / train_seconds;
    report.seconds = train_seconds;
    const Evaluation eval = evaluate(model, test, result.params.data(), inputs, labels);
    report.test_loss = eval.loss;
    report.test_accuracy = eval.accuracy;
    result.epochs.push_back(report);
    if (options.on_epoch) options.on_epoch(report);
    if (step < steps_per_epoch) break;  // max_steps reached inside the epoch
  }
  return result;
}

}  // namespace pstrain
