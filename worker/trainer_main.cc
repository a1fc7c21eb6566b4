// pstrain-train: trains a job spec in one process and prints per-epoch metrics.
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <span>
#include <sstream>

#include "common/data/table_split.h"
#include "common/engine/compute_threads.h"
#include "common/data/dataset_formats.h"
#include "common/data/dataset_manifest.h"
#include "common/base/error.h"
#include "common/base/flags.h"
#include "common/base/process_main.h"
#include "common/data/job_spec.h"
#include "common/data/model_inputs.h"
#include "common/base/log.h"
#include "common/data/model_eval.h"
#include "common/engine/model_flops.h"
#include "common/engine/model_spec.h"
#include "common/engine/optim/optimizer.h"
#include "common/engine/safetensors.h"
#include "worker/local_trainer.h"

namespace {

// A model file: its bytes and the job spec in its metadata.
std::pair<std::string, pstrain::JobSpec> read_model_file(const std::string& path) {
  using namespace pstrain;
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(path + ": cannot open");
  std::string file((std::istreambuf_iterator<char>(in)), {});
  const auto metadata = safetensors_metadata(file);
  if (!metadata || metadata->count("spec") == 0) {
    throw Error(path + ": not a pstrain model file (no spec in its __metadata__)");
  }
  JobSpec spec = parse_accepted_job_spec(metadata->at("spec"));
  return {std::move(file), std::move(spec)};
}

std::string read_binary_file(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) throw pstrain::Error(path + ": is a directory, not a file");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw pstrain::Error(path + ": cannot open (" + std::strerror(errno) + ")");
  return std::string((std::istreambuf_iterator<char>(in)), {});
}

int64_t metadata_int(const std::map<std::string, std::string>& metadata, const std::string& key,
                     const std::string& path) {
  const auto it = metadata.find(key);
  if (it == metadata.end()) throw pstrain::Error(path + ": no '" + key + "' in its __metadata__: not a pstrain checkpoint");
  try {
    size_t used = 0;
    const long long v = std::stoll(it->second, &used);
    if (used == it->second.size() && v >= 0) return v;
  } catch (const std::exception&) {
  }
  throw pstrain::Error(path + ": __metadata__." + key + " is not a count: '" + it->second + "'");
}

// --init-from FILE (fine-tune: its parameters, a fresh optimizer, step 0) or --resume-from FILE
// (its parameters, the spec's optimizer's slots and update count, and its step), read against the
// spec's model. Errors name the file and the tensor at fault.
pstrain::InitialState read_initial_state(const std::string& path, const pstrain::JobSpec& spec, bool resume) {
  using namespace pstrain;
  const std::string file = read_binary_file(path);
  const ParamLayout layout = make_param_layout(spec.model);
  const optim::OptimizerState fresh = optim::make_optimizer(spec.optimizer)->make_state(0);
  std::vector<std::string> slots;
  for (const optim::Slot& slot : fresh.slots) slots.push_back(slot.name);
  ModelState model;
  try {
    model = decode_model_state(layout, file, resume ? slots : std::vector<std::string>{});
  } catch (const ModelFileError& e) {
    throw Error(path + ": " + e.what());
  }
  InitialState initial;
  initial.params = std::move(model.params);
  if (!resume) return initial;
  initial.step = metadata_int(model.metadata, "step", path);
  if (model.metadata.count("dataset_examples") != 0) {
    initial.dataset_examples = metadata_int(model.metadata, "dataset_examples", path);
  }
  if (!slots.empty() && !model.optimizer) {
    std::string names;
    for (const std::string& slot : slots) names += (names.empty() ? "" : ", ") + optimizer_tensor_name(slot, "*");
    throw Error(path + ": no optimizer state for the spec's optimizer (" + names +
                "): it cannot be resumed from; --init-from fine-tunes from its parameters");
  }
  if (model.optimizer) {
    initial.optimizer = std::move(model.optimizer);
  } else {  // an optimizer without slots (plain SGD): only the update count
    initial.optimizer = fresh;
    initial.optimizer->iterations = model.metadata.count("optimizer_iterations") != 0
                                        ? metadata_int(model.metadata, "optimizer_iterations", path)
                                        : initial.step;
  }
  return initial;
}

// Writes `bytes` to `path` whole or not at all (a temporary file renamed over it).
void write_file_atomically(const std::string& path, const std::string& bytes) {
  const std::string temporary = path + ".tmp";
  {
    std::ofstream out(temporary, std::ios::binary | std::ios::trunc);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    out.flush();
    if (!out) throw pstrain::Error(temporary + ": cannot write (" + std::strerror(errno) + ")");
  }
  std::error_code ec;
  std::filesystem::rename(temporary, path, ec);
  if (ec) throw pstrain::Error(path + ": cannot rename " + temporary + " to it: " + ec.message());
}

// A checkpoint file: parameters, optimizer slots and the metadata a cluster's model carries.
std::string checkpoint_file(const pstrain::JobSpec& spec, const pstrain::ParamLayout& layout,
                            const pstrain::TrainerCheckpoint& c) {
  using namespace pstrain;
  Metadata metadata = {{"format", "pstrain"},
                       {"name", spec.name},
                       {"spec", job_spec_to_json(spec)},
                       {"dataset", spec.dataset.name},
                       {"dataset_examples", std::to_string(c.dataset_examples)},
                       {"epoch", std::to_string(c.step / c.steps_per_epoch)},
                       {"step", std::to_string(c.step)}};
  metadata.emplace_back(std::string(kInputDtypeKey), std::string(dtype_name(c.input_dtype)));
  if (c.preprocessing != nullptr) metadata.emplace_back("preprocessing", fitted_to_json(*c.preprocessing));
  return encode_safetensors(layout, c.params, metadata, c.optimizer);
}

// --predict FILE --inputs X.npy: the REST predict answer, offline.
int predict_file(const pstrain::FlagSet& flags) {
  using namespace pstrain;
  set_compute_threads(static_cast<int>(flags.get_int("threads", 0, 256)));
  const std::string path = flags.get("predict");
  auto [file, spec] = read_model_file(path);
  nn::Model<float> model(spec.model, 256);
  const auto params = decode_safetensors(model.layout(), file);
  if (!params) throw Error(path + ": its tensors do not fit its spec");
  const std::string inputs_path = flags.get("inputs");
  if (inputs_path.empty()) throw Error("--predict needs --inputs X.npy");
  std::ifstream in(inputs_path, std::ios::binary);
  if (!in) throw Error(inputs_path + ": cannot open");
  const NpyArray x = read_npy(in, inputs_path);
  const auto input_size = static_cast<uint64_t>(model.input_size());
  uint64_t per_example = 1;
  for (size_t i = 1; i < x.shape.size(); ++i) per_example *= x.shape[i];
  if (x.shape.size() < 2 || per_example != input_size ||
      (x.dtype != NpyArray::Dtype::kFloat32 && x.dtype != NpyArray::Dtype::kUint8)) {
    throw Error(inputs_path + ": must be float32 or uint8 of shape (n, ...) with " + std::to_string(input_size) +
                " values per example (the model's input " + shape_string(spec.model.input_shape) + ")");
  }
  // One input convention (common/data/model_inputs.h): values as the model's dataset stores them.
  const auto metadata = safetensors_metadata(file);
  Dtype stored = Dtype::kFloat32;  // a file from before the key: as the model sees them
  if (metadata) {
    if (const auto it = metadata->find(std::string(kInputDtypeKey)); it != metadata->end()) {
      stored = dtype_from_name(it->second).value_or(Dtype::kFloat32);
    }
  }
  const std::string form_name = flags.get("input-form");
  if (form_name != "raw" && form_name != "scaled") throw Error("--input-form must be raw or scaled");
  const InputForm form = form_name == "scaled" ? InputForm::kScaled : InputForm::kRaw;
  if (x.dtype == NpyArray::Dtype::kUint8 && stored != Dtype::kUint8) {
    throw Error(inputs_path + ": uint8 inputs, and the model's dataset stores float32: give its values as float32");
  }
  const uint64_t n = x.shape[0];
  std::vector<float> values(n * input_size);
  for (uint64_t i = 0; i < values.size(); ++i) {
    if (x.dtype == NpyArray::Dtype::kUint8) {
      values[i] = static_cast<float>(x.bytes[i]) * input_scale(Dtype::kUint8);
      continue;
    }
    float sent = 0;
    std::memcpy(&sent, x.bytes.data() + i * sizeof(float), sizeof(float));
    if (const std::string why = engine_value(stored, form, sent, &values[i]); !why.empty()) {
      throw Error(inputs_path + ": example " + std::to_string(i / input_size) + ", value " +
                  std::to_string(i % input_size) + ": " + why + " (here: --input-form scaled)");
    }
  }
  std::printf("PREDICTIONS %s\n", predictions_json(model, params->data(), values.data(), n).c_str());
  return 0;
}

// --evaluate FILE: the model and its spec from the file alone, the dataset from --data-dir.
int evaluate_file(const pstrain::FlagSet& flags) {
  using namespace pstrain;
  set_compute_threads(static_cast<int>(flags.get_int("threads", 0, 256)));
  const std::string path = flags.get("evaluate");
  auto [file, spec] = read_model_file(path);
  if (!flags.get("dataset").empty()) spec.dataset.name = flags.get("dataset");
  const std::string split_name = flags.get("split");
  if (split_name != "test" && split_name != "train") throw Error("--split must be test or train");
  Split split = load_any_split(flags.get("data-dir"), spec.dataset.name,
                               split_name == "test" ? SplitKind::kTest : SplitKind::kTrain);
  if (split.table || split.documents) {  // a table (or text): the model file's fitted preprocessing makes its features
    const auto metadata = safetensors_metadata(file);
    if (!metadata || metadata->count("preprocessing") == 0) throw Error(path + ": the model was not trained on a table");
    split = preprocess_split(split, fitted_from_json(metadata->at("preprocessing")));
  }
  check_spec_against_dataset(spec, split);
  nn::Model<float> model(spec.model, 256);
  const auto params = decode_safetensors(model.layout(), file);
  if (!params) throw Error(path + ": its tensors do not fit its spec");
  const Evaluation e = evaluate_model(model, params->data(), split);
  std::printf("test accuracy: %.4f\n", e.accuracy);
  std::printf("EVALUATION %s\n", evaluation_json(e, "\"dataset\":\"" + spec.dataset.name + "\",\"split\":\"" + split_name + "\",").c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace pstrain;
  FlagSet flags("pstrain-train",
                "Trains the job described by a JSON job spec in this one process (no cluster) and prints\n"
                "train/test loss and accuracy per epoch, then a RESULT line with a JSON summary.");
  flags.add("spec", "PSTRAIN_SPEC", "", "Path of the job spec (JSON, the body of POST /v1/jobs).");
  flags.add("data-dir", "PSTRAIN_DATA_DIR", "data",
            "Directory of the built-in datasets' IDX files and of dataset directories (<name>/dataset.json).");
  flags.add("threads", "PSTRAIN_THREADS", "0", "Compute threads; 0 means one per core.");
  flags.add("parallelism", "PSTRAIN_PARALLELISM", "batch",
            "How threads share a step: 'batch' (each thread takes a slice of the batch) or 'blas' (threads\n"
            "      inside each matrix product).");
  flags.add("servers", "", "0",
            "Compute the first dense layer as the workers of a cluster with this many parameter servers do (summed "
            "per server's kernel rows), and sum gradient clipping's norms over their chunks, to compare with a sync "
            "cluster bit for bit; 0: one product, one server's chunks.");
  flags.add("max-steps", "", "-1", "Stop after this many steps (-1: train every epoch).");
  flags.add("save-params", "", "", "Write the final parameters here (raw little-endian float32).");
  flags.add("init-from", "", "",
            "Fine-tune: start from this model or checkpoint file's parameters (safetensors, matched to the spec's\n"
            "      model by name and shape), with a fresh optimizer, at step 0.");
  flags.add("resume-from", "", "",
            "Resume: go on from this checkpoint (parameters, the spec's optimizer's slots and update count, and its\n"
            "      'step'): training.epochs is the total, so a run of 2 epochs resumed with epochs 3 trains one more\n"
            "      and ends bit for bit where an uninterrupted 3-epoch run does.");
  flags.add("checkpoint-every", "", "0",
            "Every N global steps (counted from step 0), write --checkpoint-dir/step-<S>.safetensors (parameters,\n"
            "      optimizer slots as optimizer.<slot>.<param>, metadata: spec, dataset, epoch, step), and at the end\n"
            "      of the run final.safetensors; 0: no checkpoints.");
  flags.add("checkpoint-dir", "", "checkpoints", "Where --checkpoint-every writes (created if missing).");
  flags.add("evaluate", "", "",
            "Instead of training: evaluate this model file (a job's safetensors, which carries its spec) on\n"
            "      --dataset's --split and print EVALUATION {json} (the figures of POST /v1/jobs/{id}/evaluate).");
  flags.add("predict", "", "",
            "Instead of training: run this model file on --inputs and print PREDICTIONS {json} (the answer\n"
            "      of POST /v1/models/{id}:predict).");
  flags.add("inputs", "", "",
            "--predict: an .npy of examples, (n, *input_shape), as the model's dataset stores them: uint8, or\n"
            "      float32 (for a uint8 dataset, raw values 0-255); the model scales them as training did.");
  flags.add("input-form", "", "raw",
            "--predict: raw (the default) or scaled (float32 values as the model sees them: pixel / 255).");
  flags.add("dataset", "", "", "--evaluate: the dataset (default: the one the model was trained on).");
  flags.add("split", "", "test", "--evaluate: test or train.");
  flags.add("log-level", "PSTRAIN_LOG_LEVEL", "info", "debug, info, warning or error.");
  flags.add_switch("describe-compute", "",
                   "Print what this process computes with (CPU, kernel level, oneDNN's and OpenBLAS's instruction\n"
                   "      sets; PSTRAIN_CPU_TARGET caps the level) and exit.");

  flags.add_switch("flops", "",
                   "Print the FLOPs of one example's forward pass through the spec's model (its matrix products:\n"
                   "      common/engine/model_flops.h; a training step costs about 3x) and exit.");

  if (const auto status = parse_flags(flags, argc, argv, "pstrain-train")) return *status;
  try {
    apply_log_level(flags);
    if (flags.get_switch("describe-compute")) {
      std::cout << describe_compute() << "\n";
      return 0;
    }
    if (!flags.get("evaluate").empty()) return evaluate_file(flags);
    if (!flags.get("predict").empty()) return predict_file(flags);
    if (flags.get("spec").empty()) throw Error("--spec is required (see --help)");
    const JobSpec spec = parse_job_spec(read_text_file(flags.get("spec"), "the job spec"));
    if (flags.get_switch("flops")) {
      if (spec.model.input_shape.empty()) throw Error("--flops needs the spec's model.input_shape");
      std::printf("forward_flops_per_example %.0f\n", forward_flops(spec.model));
      return 0;
    }
    const int64_t threads = set_compute_threads(static_cast<int>(flags.get_int("threads", 0, 256)));

    LocalTrainerOptions options;
    options.data_dir = flags.get("data-dir");
    const std::string parallelism = flags.get("parallelism");
    if (parallelism != "batch" && parallelism != "blas") throw Error("--parallelism must be 'batch' or 'blas'");
    options.replicas = parallelism == "batch" ? static_cast<int>(threads) : 1;
    options.servers = static_cast<uint32_t>(flags.get_int("servers", 0, 1024));
    options.max_steps = flags.get_int("max-steps", -1, int64_t{1} << 40);
    const std::string init_from = flags.get("init-from"), resume_from = flags.get("resume-from");
    if (!init_from.empty() && !resume_from.empty()) throw Error("--init-from and --resume-from exclude each other");
    InitialState initial;
    if (!init_from.empty() || !resume_from.empty()) {
      const bool resume = !resume_from.empty();
      initial = read_initial_state(resume ? resume_from : init_from, spec, resume);
      options.initial = &initial;
      PSLOG(kInfo) << (resume ? "resuming from " + resume_from + " at step " + std::to_string(initial.step)
                              : "fine-tuning from " + init_from);
    }
    options.checkpoint_every = flags.get_int("checkpoint-every", 0, int64_t{1} << 40);
    const std::string checkpoint_dir = flags.get("checkpoint-dir");
    const ParamLayout layout = make_param_layout(spec.model);
    if (options.checkpoint_every > 0) {
      std::error_code ec;
      std::filesystem::create_directories(checkpoint_dir, ec);
      if (ec) throw Error(checkpoint_dir + ": cannot create the checkpoint directory: " + ec.message());
      options.on_checkpoint = [&](const TrainerCheckpoint& c) {
        const std::string bytes = checkpoint_file(spec, layout, c);
        if (c.step % options.checkpoint_every == 0) {
          write_file_atomically(checkpoint_dir + "/step-" + std::to_string(c.step) + ".safetensors", bytes);
        }
        if (c.final) write_file_atomically(checkpoint_dir + "/final.safetensors", bytes);
        PSLOG(kInfo) << "checkpoint at step " << c.step << (c.final ? " (final)" : "") << " in " << checkpoint_dir;
      };
    }
    options.on_progress = [](const ProgressReport& p) {
      PSLOG(kInfo) << "epoch " << p.epoch << " step " << p.step_in_epoch << "/" << p.steps_per_epoch << " loss "
                   << p.running_loss << " accuracy " << p.running_accuracy << " " << static_cast<int64_t>(p.samples_per_second)
                   << " samples/s";
    };
    options.on_epoch = [](const EpochReport& e) {
      char val[80] = "";
      if (e.validation && e.validation->regression) {
        std::snprintf(val, sizeof val, " | val loss %.4f mae %.4f", e.validation->loss, e.validation->regression->mae());
      } else if (e.validation) {
        std::snprintf(val, sizeof val, " | val loss %.4f accuracy %.4f", e.validation->loss, e.validation->accuracy);
      }
      if (e.test_regression) {
        std::printf("epoch %lld: train loss %.4f | test loss %.4f mae %.4f rmse %.4f r2 %.4f%s | %.0f samples/s (%.2f s)\n",
                    static_cast<long long>(e.epoch), e.train_loss, e.test_loss, e.test_regression->mae(),
                    e.test_regression->rmse(), e.test_regression->r2(), val, e.samples_per_second, e.seconds);
        std::fflush(stdout);
        return;
      }
      char extra[64] = "";
      if (e.test_auc) std::snprintf(extra, sizeof extra, " auc %.4f", *e.test_auc);
      if (e.test_top5_accuracy) std::snprintf(extra, sizeof extra, " top5 %.4f", *e.test_top5_accuracy);
      std::printf("epoch %lld: train loss %.4f accuracy %.4f | test loss %.4f accuracy %.4f%s%s | %.0f samples/s (%.2f s)\n",
                  static_cast<long long>(e.epoch), e.train_loss, e.train_accuracy, e.test_loss, e.test_accuracy, extra,
                  val, e.samples_per_second, e.seconds);
      std::fflush(stdout);
    };
    PSLOG(kInfo) << "training '" << spec.name << "' on " << spec.dataset.name << " with " << threads << " thread(s); "
                 << describe_compute();
    const TrainingResult result = train_locally(spec, options);
    if (!flags.get("save-params").empty()) write_floats(flags.get("save-params"), result.params);

    double total_seconds = 0, total_samples = 0;
    std::ostringstream accuracies;
    for (size_t i = 0; i < result.epochs.size(); ++i) {
      total_seconds += result.epochs[i].seconds;
      total_samples += result.epochs[i].samples_per_second * result.epochs[i].seconds;
      accuracies << (i ? "," : "") << result.epochs[i].test_accuracy;
    }
    if (result.early_stopping) {
      const EarlyStoppingDecision& d = *result.early_stopping;
      std::printf("early stopping (%s): stopped after epoch %lld, best epoch %lld; the parameters are epoch %lld's\n",
                  spec.early_stopping.monitor.c_str(), static_cast<long long>(result.epochs[*d.stopped_epoch].epoch),
                  static_cast<long long>(result.epochs[*d.best_epoch].epoch),
                  static_cast<long long>(result.epochs[*d.model_epoch(spec.early_stopping)].epoch));
    }
    // The figures of the epoch whose parameters these are (early stopping's restore_best: an earlier one).
    const size_t model_epoch = result.early_stopping ? static_cast<size_t>(*result.early_stopping->model_epoch(spec.early_stopping))
                                                     : result.epochs.size() - 1;
    const double final_accuracy = result.epochs.empty() ? 0.0 : result.epochs[model_epoch].test_accuracy;
    if (!result.epochs.empty() && result.epochs[model_epoch].test_regression) {
      const nn::RegressionSums& r = *result.epochs[model_epoch].test_regression;
      std::printf("final test mae: %.4f rmse: %.4f r2: %.4f\n", r.mae(), r.rmse(), r.r2());
    } else {
      std::printf("final test accuracy: %.4f\n", final_accuracy);
    }
    std::printf("RESULT {\"steps\": %lld, \"final_step\": %lld, \"threads\": %lld, \"samples_per_second\": %.1f, \"test_accuracy\": [%s], "
                "\"final_test_accuracy\": %.4f}\n",
                static_cast<long long>(result.steps), static_cast<long long>(result.final_step),
                static_cast<long long>(threads),
                total_seconds > 0 ? total_samples / total_seconds : 0.0, accuracies.str().c_str(), final_accuracy);
    return 0;
  } catch (const std::exception& e) {
    std::cerr << "pstrain-train: " << e.what() << "\n";
    return 1;
  }
}
