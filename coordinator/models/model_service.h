// Trained models put to use: predictions (TensorFlow Serving's REST form) and evaluation on a
// dataset, computed in the coordinator on a thread of the service's own.
//
// A model is a finished job's (its id is the model id: the spec from the job's record, the
// parameters from its stored safetensors file) or an uploaded one (model_catalog.h: "model-<n>",
// the architecture from the file's metadata). Loaded models are kept in a small LRU cache
// (kMaxModels), so a stream of requests decodes the file once.
//
// Uploads. upload() checks a file before it is stored: a safetensors file whose every tensor is
// readable (F32, F64, F16 or BF16, within the file) and finite; when its "__metadata__" names an
// architecture ("model": a model spec as JSON, or "spec": a job spec, as pstrain's files have),
// the spec must be valid and the file must hold exactly its tensors, by name and shape (an
// optimizer's "optimizer.*" tensors may be there too; they are not read). A file without an
// architecture is accepted: jobs can start from it (init_from), predictions need one.
//
// Inputs (common/data/model_inputs.h, docs/REST.md): an instance is the model's input as
// its dataset stores it, scaled here as training scales it: nested arrays of the input shape
// ([h][w][c], or [d]) or a flat array of all its values (for a uint8 dataset, the raw pixel values,
// integers 0-255); {"b64": "..."}, the raw uint8 values of one example (base64; uint8 models
// only); or a table model's record. "input_form": "scaled" takes numbers as the engine sees them
// (pixel / 255) instead. Every instance is checked (count, shape, finite numbers, raw values,
// base64 length) and a defect names the instance's index.
//
// Thread rules: thread-safe; predict() and evaluate() return at once and call `done` on the
// service's thread. Ownership: owns its thread and cache; borrows the store and the catalog,
// which must outlive it.
#pragma once

#include <cstdint>
#include <functional>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "common/base/task_thread.h"
#include "common/data/example_types.h"
#include "coordinator/datasets/dataset_catalog.h"
#include "coordinator/store/job_store.h"
#include "coordinator/base/service_error.h"

namespace pstrain {

class ModelService {
 public:
  static constexpr size_t kMaxModels = 4;           // decoded models kept
  static constexpr size_t kMaxInstances = 4096;     // per predict request
  static constexpr int64_t kBatch = 256;            // examples per forward pass

  ModelService(JobStore& store, DatasetCatalog& catalog) : store_(store), catalog_(catalog) {}
  ~ModelService();
  ModelService(const ModelService&) = delete;
  ModelService& operator=(const ModelService&) = delete;

  struct Result {
    std::optional<ServiceError> error;
    std::string json;  // the answer's body when there is no error
    std::string content_type = "application/json";
    std::string filename;  // set for a file to download (Content-Disposition)
    std::optional<StoredFile> file;  // a stored file to download piece by piece, instead of `json`
  };
  using Done = std::function<void(Result)>;

  // POST /v1/models/{id}:predict with `body` ({"instances": [...]}): {"predictions": [{"class": k,
  // "probabilities": [...]}, ...]}, in the instances' order.
  void predict(const std::string& id, std::string body, Done done);

  // POST /v1/jobs/{id}/evaluate with `body` ({"dataset": NAME, "split": "test"|"train",
  // "checkpoint": "latest"}, each optional: the job's dataset, its test split, the final model):
  // {"examples", "loss" (mean), "accuracy", "per_class_accuracy", "confusion_matrix" (rows: true
  // class, columns: predicted)}.
  // `model_route`: asked as POST /v1/models/{id}:evaluate (the id may be an uploaded model's; a
  // model without a dataset of its own needs "dataset"; "checkpoint" is not a field).
  void evaluate(const std::string& id, std::string body, Done done, bool model_route = false);

  // GET /v1/jobs/{id}/checkpoints/{step}: the checkpoint's safetensors file, with the optimizer's
  // slots and update count (`optimizer`) or parameters only (re-encoded without them). `step`
  // is the path segment as sent (a number, or "latest").
  void checkpoint(const std::string& id, const std::string& step, bool optimizer, Done done);

  // POST /v1/models: an uploaded file, streamed to `path` (removed here, whatever happens) or in
  // `body` when path is empty, with its size and SHA-256; `name` from the query (may be empty).
  // Answers 201 with the model's JSON (job_json.h), or 400/422 naming the tensor or field.
  struct Upload {
    std::string path, body, sha256, name;
    uint64_t bytes = 0;
  };
  void upload(Upload upload, Done done);
  // GET /v1/models/{id}/file: the model's safetensors file (a trained or an uploaded model).
  void file(const std::string& id, Done done);
  // ...?format=onnx, and GET /v1/jobs/{id}/checkpoints/{step}?format=onnx (`step`): the model as
  // ONNX (model_export.cc, common/export/onnx_export.h); 409 without an architecture, 422 naming
  // what cannot be exported.
  void onnx(const std::string& id, std::optional<std::string> step, Done done);
  // DELETE /v1/models/{id}: an uploaded model (204); a trained model is its job's (409).
  void erase(const std::string& id, Done done);

  // Returns once everything posted before the call has run (tests).
  void wait_idle();

 private:
  struct Loaded;
  // The model of job `id`, from the cache or the store (service thread only).
  // `as_job`: name a missing one as a job (job-not-found) rather than a model.
  // With `step`: the parameters of the job's checkpoint at that step instead of its model.
  std::shared_ptr<Loaded> load(const std::string& id, std::optional<ServiceError>* error, bool as_job = false,
                               std::optional<int64_t> step = std::nullopt);
  // Decodes `file` for `spec`'s model and puts it first in the cache under `key` (`what` names it
  // in messages), or sets *err.
  std::shared_ptr<Loaded> cache(const std::string& key, JobSpec spec, const std::string& file, const std::string& what,
                                std::optional<ServiceError>* err);
  // How the model's dataset stores its inputs: the file's metadata "input_dtype", else its
  // dataset's catalog entry, else float32 (common/data/model_inputs.h).
  Dtype input_dtype_of(const std::map<std::string, std::string>& metadata, const JobSpec& spec) const;
  // The step of the job's checkpoint named `text` ("latest" or a number), or an error.
  std::optional<int64_t> checkpoint_step(const JobRecord& job, const std::string& text, const std::string& field,
                                         std::optional<ServiceError>* error) const;
  Result checkpoint_now(const std::string& id, const std::string& step, bool optimizer);
  Result predict_now(const std::string& id, const std::string& body);
  Result evaluate_now(const std::string& id, const std::string& body, bool model_route);
  Result upload_now(Upload& upload);
  Result file_now(const std::string& id);
  Result onnx_now(const std::string& id, const std::optional<std::string>& step);
  // Runs `work` on the service's thread and answers `done` with its result (or a 500).
  void run(std::function<Result()> work, Done done);

  JobStore& store_;
  DatasetCatalog& catalog_;
  std::list<std::shared_ptr<Loaded>> cache_;  // service thread only; most recent first
  TaskThread thread_;                         // last: joined first
};

}  // namespace pstrain
