#include "coordinator/models/model_service.h"

#include <boost/json.hpp>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <future>
#include <numeric>

#include "common/base/json_parse.h"
#include "common/base/json_text.h"
#include "common/base/log.h"
#include "common/base/sha256.h"
#include "common/data/job_spec.h"
#include "common/data/model_eval.h"
#include "common/data/model_inputs.h"
#include "common/data/table_split.h"
#include "common/engine/nn/loss.h"
#include "common/engine/nn/model.h"
#include "common/engine/safetensors.h"
#include "coordinator/store/job_json.h"
#include "coordinator/models/model_service_loaded.h"
#include "coordinator/models/predict_instances.h"

namespace pstrain {
namespace json = boost::json;


ModelService::~ModelService() = default;

void ModelService::wait_idle() {
  std::promise<void> done;
  thread_.post([&] { done.set_value(); });
  done.get_future().wait();
}

void ModelService::run(std::function<Result()> work, Done done) {
  thread_.post([work = std::move(work), done = std::move(done)] {
    Result r;
    try {
      r = work();
    } catch (const std::exception& e) {
      r = failed(service_error(500, "internal", e.what()));
    }
    done(std::move(r));
  });
}

void ModelService::predict(const std::string& id, std::string body, Done done) {
  run([this, id, body = std::move(body)] { return predict_now(id, body); }, std::move(done));
}

void ModelService::evaluate(const std::string& id, std::string body, Done done, bool model_route) {
  run([this, id, body = std::move(body), model_route] { return evaluate_now(id, body, model_route); }, std::move(done));
}

void ModelService::checkpoint(const std::string& id, const std::string& step, bool optimizer, Done done) {
  run([this, id, step, optimizer] { return checkpoint_now(id, step, optimizer); }, std::move(done));
}

void ModelService::upload(Upload upload, Done done) {
  auto shared = std::make_shared<Upload>(std::move(upload));
  run(
      [this, shared] {
        // The staging file goes whatever happens (an exception included).
        struct Remove {
          const std::string& path;
          ~Remove() {
            std::error_code ec;
            if (!path.empty()) std::filesystem::remove(path, ec);
          }
        } remove{shared->path};
        return upload_now(*shared);
      },
      std::move(done));
}

void ModelService::file(const std::string& id, Done done) {
  run([this, id] { return file_now(id); }, std::move(done));
}

void ModelService::erase(const std::string& id, Done done) {
  run(
      [this, id] {
        if (store_.uploads().erase(id)) {
          cache_.remove_if([&](const std::shared_ptr<Loaded>& m) { return m->id == id; });
          Result r;
          r.content_type.clear();  // 204: no body
          return r;
        }
        if (const auto job = store_.get(id); job && job->has_model) {
          return failed(service_error(409, "model-of-a-job", "model '" + id +
                                                                  "' is the trained model of job '" + id +
                                                                  "'; it goes with its job"));
        }
        return failed(service_error(404, "model-not-found", "there is no model '" + id + "'"));
      },
      std::move(done));
}

ModelService::Result ModelService::upload_now(Upload& upload) {
  std::string file;
  if (!upload.path.empty()) {
    std::ifstream in(upload.path, std::ios::binary);
    if (!in) return failed(service_error(500, "internal", "the uploaded file could not be read back"));
    file.resize(upload.bytes);
    in.read(file.data(), static_cast<std::streamsize>(file.size()));
    if (static_cast<uint64_t>(in.gcount()) != upload.bytes) {
      return failed(service_error(500, "internal", "the uploaded file is shorter than what was received"));
    }
  } else {
    file = std::move(upload.body);
    Sha256 hash;
    hash.update(file.data(), file.size());
    upload.sha256 = hash.hex();
  }
  UploadedModel record;
  SafetensorsContents contents;
  try {
    contents = inspect_safetensors(file);
  } catch (const ModelFileError& e) {
    return failed(service_error(422, "invalid-model-file", e.what(), e.tensor()));
  }
  if (contents.tensors.empty()) {
    return failed(service_error(422, "invalid-model-file", "the file holds no tensors"));
  }
  // The architecture, when the file names one.
  std::optional<ModelSpec> model;
  const auto meta_model = contents.metadata.find("model");
  const auto meta_spec = contents.metadata.find("spec");
  try {
    if (meta_model != contents.metadata.end()) {
      model = parse_model_spec(meta_model->second);
    } else if (meta_spec != contents.metadata.end()) {
      model = parse_accepted_job_spec(meta_spec->second).model;
    }
  } catch (const SpecError& e) {
    const std::string key = meta_model != contents.metadata.end() ? "model" : "spec";
    return failed(service_error(422, "invalid-model-file", "__metadata__." + key + " is not a valid " +
                                                               (key == "model" ? "model spec" : "job spec") + ": " + e.what(),
                                "__metadata__." + key));
  }
  if (const auto it = contents.metadata.find(std::string(kInputDtypeKey));
      it != contents.metadata.end() && !dtype_from_name(it->second)) {
    return failed(service_error(422, "invalid-model-file",
                                "__metadata__.input_dtype must be \"uint8\" or \"float32\" (how the model's dataset "
                                "stores its inputs), not \"" + it->second.substr(0, 40) + "\"",
                                "__metadata__.input_dtype"));
  }
  if (model) {
    try {
      decode_model_state(make_param_layout(*model), file);
    } catch (const ModelFileError& e) {
      return failed(service_error(422, "model-mismatch",
                                  std::string(e.what()) + " (the architecture is the file's __metadata__." +
                                      (meta_model != contents.metadata.end() ? "model" : "spec") + ")",
                                  e.tensor()));
    }
    record.model_json = model_spec_to_json(*model);
  }
  record.name = upload.name;
  if (record.name.empty()) {
    if (const auto it = contents.metadata.find("name"); it != contents.metadata.end()) record.name = it->second.substr(0, 200);
  }
  record.created_ms = now_ms();
  record.sha256 = upload.sha256;
  record.tensors = std::move(contents.tensors);
  const UploadedModel stored = store_.uploads().add(std::move(record), file);
  PSLOG(kInfo) << "model " << stored.id << " uploaded (" << stored.bytes << " bytes, " << stored.tensors.size()
               << " tensors" << (stored.model_json.empty() ? ", no architecture" : "") << ")";
  Result r;
  r.json = uploaded_model_json(stored);
  return r;
}

ModelService::Result ModelService::file_now(const std::string& id) {
  std::optional<StoredFile> file;
  if (store_.uploads().get(id)) {
    file = store_.uploads().file_pieces(id);
  } else {
    const auto job = store_.get(id);
    if (!job || !job->has_model) {
      return failed(service_error(404, "model-not-found", "there is no model '" + id +
                                                              "' (a model is an uploaded one, model-N, or a job that "
                                                              "SUCCEEDED)"));
    }
    file = store_.model_pieces(id);
  }
  if (!file) return failed(service_error(500, "model-missing", "the stored file of model '" + id + "' is unreadable"));
  Result r;
  r.content_type = "application/octet-stream";
  r.filename = id + ".safetensors";
  r.file = std::move(*file);  // sent piece by piece
  return r;
}

std::optional<int64_t> ModelService::checkpoint_step(const JobRecord& job, const std::string& text,
                                                     const std::string& field, std::optional<ServiceError>* err) const {
  std::string steps;
  for (const CheckpointInfo& c : job.checkpoints) steps += (steps.empty() ? "" : ", ") + std::to_string(c.step);
  if (text == "latest") {
    if (job.checkpoints.empty()) {
      *err = service_error(404, "checkpoint-not-found", "job '" + job.id + "' has no checkpoint (it is " +
                                                            job_state_name(job.state) + ")", field);
      return std::nullopt;
    }
    return job.checkpoints.back().step;
  }
  int64_t step = -1;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), step);
  if (ec != std::errc() || end != text.data() + text.size() || step < 0) {
    *err = service_error(422, "invalid-checkpoint", field + " must be a step (a non-negative integer) or \"latest\", not '" + text + "'", field);
    return std::nullopt;
  }
  for (const CheckpointInfo& c : job.checkpoints) {
    if (c.step == step) return step;
  }
  *err = service_error(404, "checkpoint-not-found", "job '" + job.id + "' has no checkpoint at step " + text +
                                                        " (it has: " + (steps.empty() ? "none" : steps) + ")", field);
  return std::nullopt;
}

ModelService::Result ModelService::checkpoint_now(const std::string& id, const std::string& step_text, bool optimizer) {
  const std::optional<JobRecord> job = store_.get(id);
  if (!job) return failed(service_error(404, "job-not-found", "there is no job '" + id + "'"));
  std::optional<ServiceError> err;
  const auto step = checkpoint_step(*job, step_text, "step", &err);
  if (!step) return failed(*err);
  Result r;
  r.content_type = "application/octet-stream";
  r.filename = id + "-step-" + std::to_string(*step) + (optimizer ? "-with-optimizer" : "") + ".safetensors";
  const auto missing = [&] {
    return failed(service_error(500, "checkpoint-missing", "the stored checkpoint of '" + id + "' at step " +
                                                               std::to_string(*step) + " is unreadable"));
  };
  if (optimizer) {  // the file as stored, piece by piece
    r.file = store_.checkpoint_pieces(id, *step);
    if (!r.file) return missing();
    return r;
  }
  // Parameters only: rewritten in memory (the parameters and their slots, once each).
  std::optional<std::string> file = store_.checkpoint_file(id, *step);
  if (!file) return missing();
  // Parameters only: the same file without the optimizer's tensors.
  const JobSpec spec = parse_accepted_job_spec(job->spec_json);
  const ParamLayout layout = make_param_layout(spec.model);
  ModelState state = decode_model_state(layout, *file);
  file.reset();
  Metadata metadata;
  for (const auto& [k, v] : state.metadata) {
    if (k != "optimizer_iterations") metadata.emplace_back(k, v);
  }
  r.json = encode_safetensors(layout, state.params, metadata);
  return r;
}

std::shared_ptr<ModelService::Loaded> ModelService::load(const std::string& given_id, std::optional<ServiceError>* err,
                                                         bool as_job, std::optional<int64_t> step) {
  // A checkpoint is cached under "<job>@<step>".
  const std::string id = given_id, key = step ? given_id + "@" + std::to_string(*step) : given_id;
  for (auto it = cache_.begin(); it != cache_.end(); ++it) {
    if ((*it)->id == key) {
      cache_.splice(cache_.begin(), cache_, it);
      return cache_.front();
    }
  }
  if (!as_job && !step) {
    if (const std::optional<UploadedModel> upload = store_.uploads().get(id)) {
      if (upload->model_json.empty()) {
        *err = service_error(409, "model-without-architecture",
                             "uploaded model '" + id + "' has no architecture: its file's __metadata__ names no "
                             "\"model\" (a model spec as JSON); jobs can start from it (init_from), but it cannot "
                             "run by itself");
        return nullptr;
      }
      const std::optional<std::string> file = store_.uploads().file(id);
      if (!file) {
        *err = service_error(500, "model-missing", "the stored file of uploaded model '" + id + "' is unreadable");
        return nullptr;
      }
      JobSpec spec;
      spec.model = parse_model_spec(upload->model_json);
      return cache(key, std::move(spec), *file, "uploaded model " + id, err);
    }
  }
  const std::optional<JobRecord> job = store_.get(id);
  if (!job) {
    *err = as_job ? service_error(404, "job-not-found", "there is no job '" + id + "'")
                  : service_error(404, "model-not-found", "there is no model '" + id +
                                                              "' (a model is an uploaded one, model-N, or a job that "
                                                              "SUCCEEDED)");
    return nullptr;
  }
  if (!job->has_model && !step) {
    *err = service_error(409, "model-not-ready", "job '" + id + "' is " + job_state_name(job->state) +
                                             "; its model is available once it has SUCCEEDED");
    return nullptr;
  }
  const std::optional<std::string> file = step ? store_.checkpoint_file(id, *step) : store_.model(id);
  if (!file) {
    *err = service_error(500, "model-missing", "the stored model of '" + id + "' is unreadable");
    return nullptr;
  }
  return cache(key, parse_accepted_job_spec(job->spec_json), *file, "model " + id, err);
}

Dtype ModelService::input_dtype_of(const std::map<std::string, std::string>& metadata, const JobSpec& spec) const {
  if (const auto it = metadata.find(std::string(kInputDtypeKey)); it != metadata.end()) {
    if (const std::optional<Dtype> dtype = dtype_from_name(it->second)) return *dtype;
  }
  // A file from before the key: its dataset's entry says, if it is still in the catalog.
  if (!spec.dataset.name.empty()) {
    if (const std::optional<DatasetRecord> d = catalog_.get(spec.dataset.name)) return d->dtype;
  }
  return Dtype::kFloat32;
}

std::shared_ptr<ModelService::Loaded> ModelService::cache(const std::string& key, JobSpec spec, const std::string& file,
                                                          const std::string& what, std::optional<ServiceError>* err) {
  auto loaded = std::make_shared<Loaded>();
  loaded->id = key;
  loaded->spec = std::move(spec);
  loaded->model = std::make_unique<nn::Model<float>>(loaded->spec.model, kBatch, loaded->spec.loss);
  std::optional<std::vector<float>> params = decode_safetensors(loaded->model->layout(), file);
  if (!params) {
    *err = service_error(500, "model-missing", "the stored file of " + what + " does not fit its architecture");
    return nullptr;
  }
  loaded->params = std::move(*params);
  const auto meta = safetensors_metadata(file);
  loaded->input_dtype = input_dtype_of(meta ? *meta : std::map<std::string, std::string>{}, loaded->spec);
  if (meta && meta->count("preprocessing") != 0) {
    try {
      loaded->preprocessing = std::make_shared<const FittedPreprocessing>(fitted_from_json(meta->at("preprocessing")));
    } catch (const DataError& e) {
      *err = service_error(500, "model-missing", "the stored file of " + what + " has a bad preprocessing: " + e.what());
      return nullptr;
    }
    if (loaded->preprocessing->width() != static_cast<uint32_t>(loaded->model->input_size())) {
      *err = service_error(500, "model-missing", "the stored file of " + what + " has a preprocessing of another width");
      return nullptr;
    }
  }
  if (loaded->preprocessing) {
    loaded->class_names = loaded->preprocessing->class_names;
  } else if (meta && meta->count(std::string(kClassNamesKey)) != 0) {
    // (A file's names are used only when they are one per class and distinct; else classes are
    // numbered, as without names.)
    std::vector<std::string> names = class_names_from_json(meta->at(std::string(kClassNamesKey)));
    std::vector<std::string> sorted = names;
    std::sort(sorted.begin(), sorted.end());
    const bool distinct = std::adjacent_find(sorted.begin(), sorted.end()) == sorted.end();
    if (distinct && names.size() == static_cast<size_t>(nn::loss_classes(loaded->model->loss(), loaded->model->output_size()))) {
      loaded->class_names = std::move(names);
    }
  }
  cache_.push_front(loaded);
  if (cache_.size() > kMaxModels) cache_.pop_back();
  PSLOG(kInfo) << what << " loaded for serving (" << loaded->params.size() << " parameters)";
  return loaded;
}

ModelService::Result ModelService::predict_now(const std::string& id, const std::string& body) {
  std::optional<ServiceError> err;
  const std::shared_ptr<Loaded> m = load(id, &err);  // an unknown model is 404 whatever the body
  if (!m) return failed(*err);
  boost::system::error_code ec;
  json::parse_options options;
  options.max_depth = 16;
  const json::value root = parse_json(body, ec, options);
  if (ec || !root.is_object()) {
    return failed(service_error(400, "malformed-json", "the body must be a JSON object {\"instances\": [...]}" +
                                                   (ec ? ": " + ec.message() : std::string())));
  }
  InputForm form = InputForm::kRaw;
  for (const auto& field : root.as_object()) {
    if (field.key() == "input_form") {
      if (field.value() != "raw" && field.value() != "scaled") {
        return failed(service_error(422, "invalid-instances",
                                    "/input_form must be \"raw\" (values as the dataset stores them, the default) or "
                                    "\"scaled\" (as the model sees them: pixel / 255 for a uint8 dataset)",
                                    "/input_form"));
      }
      if (field.value() == "scaled" && m->preprocessing) {
        return failed(service_error(422, "invalid-instances",
                                    "/input_form: a table model takes raw records (its fitted preprocessing runs "
                                    "inside); \"scaled\" is for image and array models",
                                    "/input_form"));
      }
      form = field.value() == "scaled" ? InputForm::kScaled : InputForm::kRaw;
    } else if (field.key() != "instances") {
      return failed(service_error(422, "invalid-instances",
                                  "/" + std::string(field.key()) + " is not a known field (known: instances, input_form)",
                                  "/" + std::string(field.key())));
    }
  }
  const json::value* instances = root.as_object().if_contains("instances");
  if (instances == nullptr || !instances->is_array() || instances->as_array().empty()) {
    return failed(service_error(422, "invalid-instances", "/instances must be a non-empty array of the model's inputs", "/instances"));
  }
  const auto& list = instances->as_array();
  if (list.size() > kMaxInstances) {
    return failed(service_error(413, "too-many-instances",
                        "/instances has " + std::to_string(list.size()) + " instances; at most " +
                            std::to_string(kMaxInstances) + " per request",
                        "/instances"));
  }
  const Shape& shape = m->spec.model.input_shape;
  const auto input_size = static_cast<size_t>(m->model->input_size());

  // One column per instance, in the order the engine reads an example.
  std::vector<float> inputs;
  inputs.reserve(list.size() * input_size);
  for (size_t i = 0; i < list.size(); ++i) {
    const json::value& v = list[i];
    const std::string where = "/instances/" + std::to_string(i);
    const size_t before = inputs.size();
    std::string why;
    if (m->preprocessing && predict_instances::is_record(*m->preprocessing, v)) {
      inputs.resize(before + input_size);
      why = predict_instances::preprocess_record(*m->preprocessing, v, inputs.data() + before);
    } else if (v.is_object()) {
      const json::value* b64 = v.as_object().if_contains("b64");
      if (b64 == nullptr || !b64->is_string() || v.as_object().size() != 1) {
        why = "an object instance must be {\"b64\": \"<base64 of the raw uint8 values, or of a PNG or JPEG image>\"}";
      } else if (const auto bytes = predict_instances::base64_decode(std::string_view(b64->as_string())); !bytes) {
        why = "b64 is not valid base64";
      } else if (const auto pixels = predict_instances::encoded_image(*bytes, shape, m->input_dtype, why)) {
        for (uint8_t c : *pixels) inputs.push_back(static_cast<float>(c) * input_scale(Dtype::kUint8));
      } else if (bytes->size() == input_size && m->input_dtype == Dtype::kUint8) {
        why.clear();  // raw values that begin like an image (and are not one)
        for (unsigned char c : *bytes) inputs.push_back(static_cast<float>(c) * input_scale(Dtype::kUint8));
      } else if (!why.empty()) {
        // an image's signature that does not decode, or a model that takes no image: why says so
      } else if (bytes->size() != input_size) {
        why = "b64 holds " + std::to_string(bytes->size()) + " bytes; the model's input " + shape_string(shape) + " has " +
              std::to_string(input_size) + " values";
      } else {
        why = "b64 carries uint8 values, and this model's dataset stores float32: send its values as numbers";
      }
    } else {
      const predict_instances::ValueRule rule{m->input_dtype, form, before};
      const bool flat = v.is_array() && v.as_array().size() == input_size && shape.size() > 1 &&
                        (v.as_array().empty() || v.as_array()[0].is_number());
      why = predict_instances::flatten(v, flat ? Shape{static_cast<int64_t>(input_size)} : shape, 0, rule, inputs);
    }
    if (!why.empty()) return failed(service_error(422, "invalid-instance", where + ": " + why, where));
    if (inputs.size() - before != input_size) {
      return failed(service_error(422, "invalid-instance", where + ": has " + std::to_string(inputs.size() - before) +
                                                       " values, the model's input needs " + std::to_string(input_size),
                          where));
    }
  }

  std::string out = predictions_json(*m->model, m->params.data(), inputs.data(), list.size(),
                                     m->class_names,
                                     m->preprocessing != nullptr);
  Result r;
  r.json = std::move(out);
  return r;
}

ModelService::Result ModelService::evaluate_now(const std::string& id, const std::string& body, bool model_route) {
  std::optional<ServiceError> err;
  std::string dataset;
  SplitKind kind = SplitKind::kTest;
  std::string checkpoint = "latest";
  bool checkpoint_given = false;
  if (!body.empty()) {
    boost::system::error_code ec;
    const json::value root = parse_json(body, ec);
    if (ec || !root.is_object()) return failed(service_error(400, "malformed-json", "the body must be a JSON object"));
    for (const auto& field : root.as_object()) {
      const std::string key(field.key());
      const json::value& v = field.value();
      if (key == "dataset") {
        if (!v.is_string()) return failed(service_error(422, "invalid-evaluation", "/dataset must be a dataset name", "/dataset"));
        dataset = std::string(v.as_string());
      } else if (key == "split") {
        if (v != "test" && v != "train") return failed(service_error(422, "invalid-evaluation", "/split must be \"test\" or \"train\"", "/split"));
        kind = v == "train" ? SplitKind::kTrain : SplitKind::kTest;
      } else if (key == "checkpoint" && !model_route) {
        if (v.is_string()) {
          checkpoint = std::string(v.as_string());
        } else if (v.is_int64() && v.as_int64() >= 0) {
          checkpoint = std::to_string(v.as_int64());
        } else {
          return failed(service_error(422, "invalid-evaluation", "/checkpoint must be a step or \"latest\"", "/checkpoint"));
        }
        checkpoint_given = true;
      } else {
        return failed(service_error(422, "invalid-evaluation",
                                    "/" + key + " is not a known field (known: dataset, split" +
                                        (model_route ? "; a job's checkpoint is evaluated with POST /v1/jobs/{id}/evaluate)"
                                                     : ", checkpoint)"),
                                    "/" + key));
      }
    }
  }
  // "latest" without a body field: the final model; a step (or "latest" asked for): the job's
  // checkpoint (for a job that succeeded, "latest" is its final checkpoint: the same parameters).
  std::optional<int64_t> step;
  if (checkpoint_given) {
    const std::optional<JobRecord> job = store_.get(id);
    if (!job) return failed(service_error(404, "job-not-found", "there is no job '" + id + "'"));
    if (checkpoint != "latest" || !job->has_model) {
      step = checkpoint_step(*job, checkpoint, "/checkpoint", &err);
      if (!step) return failed(*err);
    }
  }
  const std::shared_ptr<Loaded> m = load(id, &err, !model_route, step);
  if (!m) return failed(*err);
  if (dataset.empty()) dataset = m->spec.dataset.name;
  if (dataset.empty()) {
    return failed(service_error(422, "invalid-evaluation", "/dataset is required: model '" + id +
                                                               "' was uploaded and has no dataset of its own",
                                "/dataset"));
  }
  std::string why;
  const std::optional<DatasetInfo> info = catalog_.info(dataset, &why);
  if (!info) return failed(service_error(422, "invalid-evaluation", "/dataset " + why, "/dataset"));
  JobSpec on_it = m->spec;
  on_it.dataset.name = dataset;
  const bool text_model = m->preprocessing && m->preprocessing->text;
  if (static_cast<bool>(info->table) != (m->preprocessing && !text_model) || info->text != text_model) {
    const std::string kind = info->table ? "a table" : info->text ? "text" : "arrays or images";
    const std::string model_kind = text_model ? "text" : m->preprocessing ? "a table" : "arrays or images";
    return failed(service_error(422, "invalid-evaluation",
                                "/dataset: " + dataset + " holds " + kind + " but the model was trained on " + model_kind,
                                "/dataset"));
  }
  try {
    if (!info->table && !info->text) check_spec_against_dataset(on_it, *info);
  } catch (const SpecError& e) {
    return failed(service_error(422, "invalid-evaluation", std::string("/dataset: the model does not fit it: ") + e.what(), "/dataset"));
  }
  Split split = catalog_.load(dataset, kind);
  if (text_model) {
    split = preprocess_split(split, *m->preprocessing);
  } else if (m->preprocessing) {
    if (!split.table) {
      // A split uploaded as arrays beside a table: its values are the table's stored columns, which
      // works when none is categorical or an id (no codes to map).
      for (const FittedColumn& c : m->preprocessing->columns) {
        if (c.type == ColumnType::kCategorical || c.type == ColumnType::kId) {
          return failed(service_error(422, "invalid-evaluation",
                                      "/dataset: this split of " + dataset + " holds arrays, not the table the model's column '" +
                                          c.name + "' (" + column_type_name(c.type) + ") needs",
                                      "/dataset"));
        }
      }
      split.table = info->table;
    }
    // The table's stored columns must be the model's, in order; then its fitted steps apply.
    const std::vector<const TableColumn*> stored = split.table->stored_columns();
    for (size_t k = 0; k < std::max(stored.size(), m->preprocessing->columns.size()); ++k) {
      const FittedColumn* f = k < m->preprocessing->columns.size() ? &m->preprocessing->columns[k] : nullptr;
      if (k >= stored.size() || f == nullptr || stored[k]->name != f->name || stored[k]->type != f->type) {
        return failed(service_error(422, "invalid-evaluation",
                                    "/dataset: the table's columns differ from the model's at column " + std::to_string(k + 1) +
                                        " (" + (k < stored.size() ? stored[k]->name : std::string("none")) + " vs " +
                                        (f ? f->name : std::string("none")) + ")",
                                    "/dataset"));
      }
    }
    // And the text columns it tokenizes must be stored with the split's rows.
    for (const FittedTextColumn& t : m->preprocessing->text_columns) {
      const bool held = std::any_of(split.text_cells.begin(), split.text_cells.end(),
                                    [&](const Split::TextCells& c) { return c.column == t.name && c.cells; });
      if (!held) {
        return failed(service_error(422, "invalid-evaluation",
                                    "/dataset: this split of " + dataset + " has no stored text column '" + t.name +
                                        "', which the model tokenizes",
                                    "/dataset"));
      }
    }
    split = preprocess_split(split, *m->preprocessing);
  }
  check_spec_against_dataset(on_it, split);

  const Evaluation evaluation = evaluate_model(*m->model, m->params.data(), split);
  const std::string extra = "\"model\":" + to_json_text(json::value(id)) + ",\"dataset\":" +
                            to_json_text(json::value(dataset)) + ",\"split\":\"" +
                            (kind == SplitKind::kTest ? "test" : "train") + "\",\"checkpoint\":" +
                            (step ? std::to_string(*step) : std::string("\"latest\"")) + ",";
  Result r;
  r.json = evaluation_json(evaluation, extra);
  return r;
}

}  // namespace pstrain
