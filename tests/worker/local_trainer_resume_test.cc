// Resume and fine-tune in the standalone trainer (worker/local_trainer.h): a run resumed from a
// checkpoint (parameters, optimizer slots, step; training.epochs the total) ends bit for bit where
// the uninterrupted run does, from an epoch's end or from inside an epoch, for Adam and for SGD
// with momentum; a fine-tune starts at step 0 with a fresh optimizer. Then pstrain-train end to
// end: its checkpoint files, --resume-from and its errors.
#include <doctest/doctest.h>

#include <sys/wait.h>

#include <cstdio>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "common/data/dataset.h"
#include "common/base/error.h"
#include "common/data/job_spec.h"
#include "common/engine/model_spec.h"
#include "common/engine/nn/data_parallel_model.h"
#include "common/engine/nn/gradient_scaling.h"
#include "common/engine/optim/optimizer.h"
#include "common/base/rng.h"
#include "common/engine/safetensors.h"
#include "tests/synthetic_data.h"
#include "tests/test_support.h"
#include "common/data/validation_split.h"
#include "worker/local_trainer.h"

using namespace pstrain;

namespace {

constexpr int64_t kStepsPerEpoch = 19;  // 1200 examples in batches of 64, the last one of 48

// 30 float32 features in 3 linearly separable classes, 1200 training and 400 test examples.
Split separable_split(const std::string& dataset, SplitKind kind) {
  Rng rng(7);
  std::vector<float> w(3 * 30);
  for (float& v : w) v = rng.uniform_float(-1.0f, 1.0f);
  const testing::Examples train = testing::separable_features(rng, w, 1200);
  const testing::Examples test = testing::separable_features(rng, w, 400);
  return make_split(dataset, kind, testing::as_parsed(kind == SplitKind::kTrain ? train : test, {30}, Dtype::kFloat32, 3));
}

OptimizerSpec adam() {
  OptimizerSpec o;
  o.type = OptimizerType::kAdam;
  o.learning_rate = 0.01f;
  return o;
}

OptimizerSpec sgd_momentum() {
  OptimizerSpec o;
  o.type = OptimizerType::kSgd;
  o.learning_rate = 0.05f;
  o.momentum = 0.9f;
  return o;
}

JobSpec separable_job(const OptimizerSpec& optimizer, int64_t epochs) {
  JobSpec spec;
  spec.name = "separable-30-mlp";
  spec.dataset.name = "separable-30";
  spec.dataset.shuffle_seed = 5;
  spec.model.input_shape = {30};
  spec.model.seed = 3;
  LayerSpec hidden, out;
  hidden.units = 32;
  hidden.activation = Activation::kReLU;
  hidden.l2 = 1e-4f;  // the regularisation term reads the parameters too
  out.units = 3;
  spec.model.layers = {hidden, out};
  spec.optimizer = optimizer;
  spec.training.global_batch_size = 64;
  spec.training.epochs = epochs;
  return spec;
}

// A checkpoint as a caller keeps it (the callback's state is valid only during the call).
struct Saved {
  int64_t step = 0;
  bool final = false;
  std::vector<float> params;
  optim::OptimizerState optimizer;
};

struct Run {
  TrainingResult result;
  std::vector<Saved> checkpoints;
};

Run train(const JobSpec& spec, const InitialState* initial = nullptr, int64_t checkpoint_every = 0,
          int64_t max_steps = -1) {
  LocalTrainerOptions options;
  options.load_split = separable_split;
  options.initial = initial;
  options.max_steps = max_steps;
  options.checkpoint_every = checkpoint_every;
  Run run;
  options.on_checkpoint = [&](const TrainerCheckpoint& c) {
    CHECK(c.steps_per_epoch == kStepsPerEpoch);
    CHECK(c.dataset_examples == 1200);
    run.checkpoints.push_back({c.step, c.final, {c.params.begin(), c.params.end()}, *c.optimizer});
  };
  run.result = train_locally(spec, options);
  return run;
}

InitialState resume_state(const Saved& s) {
  InitialState initial;
  initial.params = s.params;
  initial.optimizer = s.optimizer;
  initial.step = s.step;
  initial.dataset_examples = 1200;
  return initial;
}

std::vector<float> params_of(const TrainingResult& r) { return {r.params.begin(), r.params.end()}; }

void check_same_state(const TrainingResult& resumed, const TrainingResult& uninterrupted) {
  CHECK(resumed.final_step == uninterrupted.final_step);
  size_t differ = 0;
  for (size_t i = 0; i < resumed.params.size(); ++i) differ += resumed.params[i] != uninterrupted.params[i] ? 1 : 0;
  CHECK_MESSAGE(differ == 0, differ << " of " << resumed.params.size() << " parameters differ");
  CHECK(resumed.optimizer.iterations == uninterrupted.optimizer.iterations);
  REQUIRE(resumed.optimizer.slots.size() == uninterrupted.optimizer.slots.size());
  for (size_t s = 0; s < resumed.optimizer.slots.size(); ++s) {
    INFO("slot " << resumed.optimizer.slots[s].name);
    CHECK(resumed.optimizer.slots[s].values == uninterrupted.optimizer.slots[s].values);
  }
}

void check_same_epoch(const EpochReport& a, const EpochReport& b) {
  CHECK(a.epoch == b.epoch);
  CHECK(a.train_loss == b.train_loss);
  CHECK(a.train_accuracy == b.train_accuracy);
  CHECK(a.test_loss == b.test_loss);
  CHECK(a.test_accuracy == b.test_accuracy);
}

std::string error_of(const JobSpec& spec, const InitialState& initial) {
  try {
    train(spec, &initial);
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace

TEST_CASE("resume: 2 epochs, then resumed to 3, equal 3 uninterrupted epochs bit for bit (Adam, SGD momentum)") {
  for (const OptimizerSpec& optimizer : {adam(), sgd_momentum()}) {
    CAPTURE(optimizer_type_name(optimizer.type));
    const Run uninterrupted = train(separable_job(optimizer, 3));
    REQUIRE(uninterrupted.result.epochs.size() == 3);
    CHECK(uninterrupted.result.final_step == 3 * kStepsPerEpoch);
    CHECK(uninterrupted.result.epochs.back().test_accuracy >= 0.8);  // it learns

    const Run first = train(separable_job(optimizer, 2), nullptr, 1000);  // only the final checkpoint
    REQUIRE(first.checkpoints.size() == 1);
    const Saved& end = first.checkpoints.back();
    CHECK(end.final);
    CHECK(end.step == 2 * kStepsPerEpoch);
    CHECK(end.optimizer.iterations == 2 * kStepsPerEpoch);
    REQUIRE(end.optimizer.slots.size() == (optimizer.type == OptimizerType::kAdam ? 2u : 1u));

    const InitialState initial = resume_state(end);
    const Run resumed = train(separable_job(optimizer, 3), &initial);
    CHECK(resumed.result.steps == kStepsPerEpoch);
    check_same_state(resumed.result, uninterrupted.result);
    // Metrics only for the epoch trained: the third, as the uninterrupted run saw it.
    REQUIRE(resumed.result.epochs.size() == 1);
    check_same_epoch(resumed.result.epochs[0], uninterrupted.result.epochs[2]);
  }
}

TEST_CASE("resume: a checkpoint inside an epoch, through a safetensors file, resumes to the uninterrupted end") {
  for (const OptimizerSpec& optimizer : {adam(), sgd_momentum()}) {
    CAPTURE(optimizer_type_name(optimizer.type));
    const JobSpec spec = separable_job(optimizer, 3);
    // Every 7 steps (7 does not divide 19): 7, 14, ..., 56, and the end, 57, on its own.
    const Run uninterrupted = train(spec, nullptr, 7);
    std::vector<int64_t> steps;
    for (const Saved& s : uninterrupted.checkpoints) steps.push_back(s.final ? -s.step : s.step);
    CHECK(steps == std::vector<int64_t>{7, 14, 21, 28, 35, 42, 49, 56, -57});
    CHECK(params_of(uninterrupted.result) == uninterrupted.checkpoints.back().params);

    // Step 28: epoch 2 (index 1), 9 steps into it.
    const Saved& mid = uninterrupted.checkpoints[3];
    REQUIRE(mid.step == 28);
    const ParamLayout layout = make_param_layout(spec.model);
    const std::string file = encode_safetensors(layout, mid.params, {{"step", "28"}}, &mid.optimizer);
    std::vector<std::string> slots;
    for (const optim::Slot& s : mid.optimizer.slots) slots.push_back(s.name);
    const ModelState decoded = decode_model_state(layout, file, slots);
    REQUIRE(decoded.optimizer.has_value());
    InitialState initial;
    initial.params = decoded.params;
    initial.optimizer = decoded.optimizer;
    initial.step = std::stoll(decoded.metadata.at("step"));

    const Run resumed = train(spec, &initial, 7);
    CHECK(resumed.result.steps == 57 - 28);
    check_same_state(resumed.result, uninterrupted.result);
    // Its checkpoints fall on the same global steps as the uninterrupted run's, with the same state.
    REQUIRE(resumed.checkpoints.size() == 5);
    CHECK(resumed.checkpoints[0].step == 35);
    CHECK(resumed.checkpoints[0].params == uninterrupted.checkpoints[4].params);
    // Epochs 2 (partly: its last 10 steps) and 3 are reported; the third as uninterrupted.
    REQUIRE(resumed.result.epochs.size() == 2);
    CHECK(resumed.result.epochs[0].epoch == 2);
    CHECK(resumed.result.epochs[0].test_accuracy == uninterrupted.result.epochs[1].test_accuracy);
    check_same_epoch(resumed.result.epochs[1], uninterrupted.result.epochs[2]);

    // max_steps cuts a run inside an epoch; its final checkpoint resumes to the same end too.
    const Run cut = train(spec, nullptr, 0, 23);
    REQUIRE(cut.checkpoints.size() == 1);
    CHECK(cut.checkpoints[0].step == 23);
    const InitialState from_cut = resume_state(cut.checkpoints[0]);
    check_same_state(train(spec, &from_cut).result, uninterrupted.result);
  }
}

TEST_CASE("fine-tune: parameters from a file, a fresh optimizer, step 0") {
  const JobSpec spec = separable_job(adam(), 3);
  const Run donor = train(spec, nullptr, 0, 28);
  const Saved& at28 = donor.checkpoints.back();
  REQUIRE(at28.step == 28);

  InitialState fine_tune;
  fine_tune.params = at28.params;  // no optimizer, step 0
  const Run tuned = train(spec, &fine_tune, 0, 1);
  CHECK(tuned.result.final_step == 1);
  CHECK(tuned.result.optimizer.iterations == 1);
  REQUIRE(tuned.result.epochs.size() == 1);
  CHECK(tuned.result.epochs[0].epoch == 1);

  // The same step by hand: epoch 0's first batch, a fresh Adam, from the file's parameters.
  const Split data = separable_split("separable-30", SplitKind::kTrain);
  nn::DataParallelModel<float> model(spec.model, 64, 1);
  const ParamLayout& layout = model.layout();
  AlignedFloats params(at28.params.begin(), at28.params.end()), grads(layout.total_size()), inputs(64 * 30);
  std::vector<int32_t> labels(64);
  const std::vector<uint32_t> order = epoch_order(data.size, spec.dataset.shuffle_seed, 0);
  data.gather({order.data(), 64}, inputs.data(), labels.data());
  model.compute_gradients(params.data(), inputs.data(), labels.data(), 64, grads.data());
  nn::scale_and_regularize(layout, grads.data(), params.data(), 64);
  const auto optimizer = optim::make_optimizer(spec.optimizer);
  optim::OptimizerState fresh = optimizer->make_state(layout.total_size());
  optimizer->apply(params, grads, fresh);
  CHECK(params_of(tuned.result) == std::vector<float>(params.begin(), params.end()));

  // ... which is not what resuming from the same file does (step 29 with Adam's slots).
  const InitialState resume = resume_state(at28);
  const Run resumed = train(spec, &resume, 0, 1);
  CHECK(resumed.result.final_step == 29);
  CHECK(params_of(resumed.result) != params_of(tuned.result));
}

TEST_CASE("resume: a state that does not fit is an error that says why") {
  const JobSpec spec = separable_job(adam(), 2);
  const Run done = train(spec, nullptr, 1000);
  const Saved& end = done.checkpoints.back();
  InitialState initial = resume_state(end);
  CHECK(error_of(spec, initial).find("nothing to train") != std::string::npos);
  CHECK(error_of(separable_job(adam(), 3), initial) == "(no error)");

  InitialState wrong_slots = resume_state(end);
  wrong_slots.step = 5;
  CHECK(error_of(separable_job(sgd_momentum(), 2), wrong_slots).find("slots [m, v]") != std::string::npos);

  InitialState short_params = resume_state(end);
  short_params.step = 5;
  short_params.params.pop_back();
  CHECK(error_of(spec, short_params).find("initial parameters") != std::string::npos);

  InitialState other_data = resume_state(end);
  other_data.step = 5;
  other_data.dataset_examples = 1000;
  CHECK(error_of(spec, other_data).find("1000 training examples") != std::string::npos);
}

// ---- pstrain-train end to end ------------------------------------------------------------------

namespace {

struct Exit {
  int code = -1;
  std::string output;  // stdout and stderr
};

Exit run_trainer(const std::string& arguments) {
  const std::string command = std::string(PSTRAIN_BINARY_DIR) + "/worker/pstrain-train --threads 1 --data-dir " +
                              testing::data_dir() + " --log-level warning " + arguments + " 2>&1";
  FILE* out = ::popen(command.c_str(), "r");
  REQUIRE(out != nullptr);
  Exit e;
  char buffer[4096];
  while (size_t n = std::fread(buffer, 1, sizeof buffer, out)) e.output.append(buffer, n);
  const int status = ::pclose(out);
  e.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return e;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), {});
}

void write_spec(const std::string& path, int64_t epochs, int hidden2 = 12) {
  const JobSpec spec = testing::mlp_job(24, hidden2, static_cast<int>(epochs));
  std::ofstream(path) << job_spec_to_json(spec);
}

}  // namespace

TEST_CASE("pstrain-train --checkpoint-every and --resume-from end to end on mnist10k") {
  testing::TempDir dir;
  write_spec(dir.file("spec2.json"), 2);
  write_spec(dir.file("spec3.json"), 3);
  const Exit full = run_trainer("--spec " + dir.file("spec3.json") + " --save-params " + dir.file("full.bin"));
  REQUIRE_MESSAGE(full.code == 0, full.output);

  // 40 steps an epoch: checkpoints at 30, 60 and the final one at 80.
  const Exit first = run_trainer("--spec " + dir.file("spec2.json") + " --checkpoint-every 30 --checkpoint-dir " +
                                 dir.file("ck"));
  REQUIRE_MESSAGE(first.code == 0, first.output);
  for (const char* name : {"step-30", "step-60", "final"}) {
    INFO(name);
    const std::string file = read_file(dir.file("ck/") + name + ".safetensors");
    const auto metadata = safetensors_metadata(file);
    REQUIRE(metadata.has_value());
    CHECK(metadata->at("format") == "pstrain");
    CHECK(metadata->at("dataset") == "mnist10k");
    CHECK(metadata->at("dataset_examples") == "5002");
    CHECK(parse_accepted_job_spec(metadata->at("spec")).training.epochs == 2);
  }
  const auto final_metadata = *safetensors_metadata(read_file(dir.file("ck/final.safetensors")));
  CHECK(final_metadata.at("step") == "80");
  CHECK(final_metadata.at("epoch") == "2");
  CHECK(final_metadata.at("optimizer_iterations") == "80");
  CHECK(safetensors_metadata(read_file(dir.file("ck/step-30.safetensors")))->at("epoch") == "0");

  // Resumed from the end of epoch 2 and from inside epoch 1: the uninterrupted parameters.
  for (const char* from : {"final", "step-30"}) {
    INFO("resumed from " << from);
    const std::string out = dir.file(std::string("resumed-") + from + ".bin");
    const Exit resumed = run_trainer("--spec " + dir.file("spec3.json") + " --resume-from " + dir.file("ck/") + from +
                                     ".safetensors --save-params " + out);
    REQUIRE_MESSAGE(resumed.code == 0, resumed.output);
    CHECK(resumed.output.find("\"final_step\": 120") != std::string::npos);
    CHECK(read_file(out) == read_file(dir.file("full.bin")));
  }

  // Errors: one line, exit code 1.
  const auto check_error = [&](const std::string& arguments, const std::string& expected) {
    const Exit e = run_trainer(arguments);
    INFO(arguments << " -> " << e.output);
    CHECK(e.code == 1);
    CHECK(e.output.find(expected) != std::string::npos);
    CHECK(e.output.find('\n') == e.output.size() - 1);
  };
  check_error("--spec " + dir.file("spec2.json") + " --resume-from " + dir.file("ck/final.safetensors"), "nothing to train");
  check_error("--spec " + dir.file("spec3.json") + " --resume-from " + dir.file("missing.safetensors"), "cannot open");
  // A model file without the optimizer's slots fine-tunes, but does not resume.
  const JobSpec spec = testing::mlp_job(24, 12, 3);
  const ParamLayout layout = make_param_layout(spec.model);
  std::vector<float> params(layout.total_size(), 0.0f);
  std::ofstream(dir.file("model.safetensors"), std::ios::binary)
      << encode_safetensors(layout, params, {{"format", "pstrain"}, {"step", "10"}});
  check_error("--spec " + dir.file("spec3.json") + " --resume-from " + dir.file("model.safetensors"),
              "no optimizer state for the spec's optimizer (optimizer.m.*, optimizer.v.*)");
  const Exit tuned = run_trainer("--spec " + dir.file("spec3.json") + " --init-from " + dir.file("model.safetensors") +
                                 " --max-steps 2");
  CHECK_MESSAGE(tuned.code == 0, tuned.output);
  CHECK(tuned.output.find("\"final_step\": 2") != std::string::npos);
  // Another model's file names the tensor at fault.
  write_spec(dir.file("other.json"), 3, 13);
  check_error("--spec " + dir.file("other.json") + " --init-from " + dir.file("ck/final.safetensors"),
              "tensor 'layers.2.kernel' has shape [24, 12]; the model's is [24, 13]");
}

TEST_CASE("standalone early stopping: stops where the rule says, restore_best gives the best epoch's parameters") {
  // min_delta 0.9 in accuracy: only epoch 1 improves; patience 1 stops after epoch 2.
  JobSpec spec = separable_job(adam(), 6);
  spec.early_stopping.enabled = true;
  spec.early_stopping.monitor = "test_accuracy";
  spec.early_stopping.maximize = true;
  spec.early_stopping.min_delta = 0.9;
  spec.early_stopping.patience = 1;
  const Run stopped = train(spec);
  REQUIRE(stopped.result.early_stopping);
  CHECK(stopped.result.epochs.size() == 2);
  CHECK(*stopped.result.early_stopping->stopped_epoch == 1);
  CHECK(stopped.result.final_step == 2 * kStepsPerEpoch);
  // Without restore_best: the parameters of a plain 2-epoch run.
  const Run two = train(separable_job(adam(), 2));
  CHECK(params_of(stopped.result) == params_of(two.result));

  // With restore_best: those of a plain 1-epoch run.
  spec.early_stopping.restore_best = true;
  const Run best = train(spec);
  REQUIRE(best.result.early_stopping);
  CHECK(*best.result.early_stopping->model_epoch(spec.early_stopping) == 0);
  const Run one = train(separable_job(adam(), 1));
  CHECK(params_of(best.result) == params_of(one.result));

  // restore_best with patience beyond the run: it runs every epoch and still ends with epoch 1's.
  spec.training.epochs = 3;
  spec.early_stopping.patience = 10;
  const Run all = train(spec);
  CHECK(all.result.epochs.size() == 3);
  REQUIRE(all.result.early_stopping);
  CHECK(*all.result.early_stopping->stopped_epoch == 2);
  CHECK(params_of(all.result) == params_of(one.result));
}

TEST_CASE("standalone validation_fraction: trains on the rest, reports the held-out figures, early stopping watches them") {
  JobSpec spec = separable_job(adam(), 3);
  spec.training.validation_fraction = 0.25;
  // (train() checks the checkpoints' steps per epoch of the whole split: not this one's.)
  const auto train = [](const JobSpec& s) {
    LocalTrainerOptions options;
    options.load_split = separable_split;
    return Run{train_locally(s, options), {}};
  };
  const Run held = train(spec);
  const Split all = separable_split("separable-30", SplitKind::kTrain);
  const HeldOut cut = hold_out_validation(all, 0.25, spec.dataset.shuffle_seed);
  CHECK(cut.validation.size >= 290);
  CHECK(cut.validation.size <= 310);
  const int64_t per_epoch = (cut.train.size + 63) / 64;
  CHECK(held.result.final_step == 3 * per_epoch);
  REQUIRE(held.result.epochs.size() == 3);
  for (const EpochReport& e : held.result.epochs) {
    REQUIRE(e.validation);
    CHECK(e.validation->loss > 0);
    CHECK(e.validation->accuracy > 0.5);  // linearly separable: learnt within an epoch
  }
  CHECK(*epoch_figure(held.result.epochs[1], "val_loss") == held.result.epochs[1].validation->loss);
  CHECK_FALSE(epoch_figure(held.result.epochs[1], "val_mae"));

  // Early stopping on val_accuracy with a min_delta nothing meets: stops after epoch 2.
  spec.early_stopping.enabled = true;
  spec.early_stopping.monitor = "val_accuracy";
  spec.early_stopping.maximize = true;
  spec.early_stopping.min_delta = 2;
  const Run stopped = train(spec);
  CHECK(stopped.result.epochs.size() == 2);
  CHECK(params_of(stopped.result) != params_of(held.result));
}
