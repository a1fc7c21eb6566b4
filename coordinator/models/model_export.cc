// ModelService's ONNX export (model_service.h onnx()): a model or checkpoint as it is loaded for
// predictions, written as ONNX by common/export/onnx_export.h, taking inputs as `:predict` does
// (common/data/model_inputs.h: uint8 examples as raw pixel values, multiplied by 1/255 inside the
// graph) and metadata_props saying what the model is.
#include <boost/json.hpp>

#include "common/base/error.h"
#include "common/data/job_spec.h"
#include "common/data/model_inputs.h"
#include "common/data/preprocessing.h"
#include "common/engine/nn/model.h"
#include "common/export/onnx_export.h"
#include "coordinator/datasets/dataset_catalog.h"
#include "coordinator/models/model_service.h"
#include "coordinator/models/model_service_loaded.h"

namespace pstrain {
void ModelService::onnx(const std::string& id, std::optional<std::string> step, Done done) {
  run([this, id, step] { return onnx_now(id, step); }, std::move(done));
}

ModelService::Result ModelService::onnx_now(const std::string& id, const std::optional<std::string>& step_text) {
  std::optional<ServiceError> err;
  std::optional<int64_t> step;
  std::string spec_json;
  if (step_text) {
    const std::optional<JobRecord> job = store_.get(id);
    if (!job) return failed(service_error(404, "job-not-found", "there is no job '" + id + "'"));
    step = checkpoint_step(*job, *step_text, "step", &err);
    if (!step) return failed(*err);
  }
  const std::shared_ptr<Loaded> m = load(id, &err, step.has_value(), step);
  if (!m) return failed(*err);
  OnnxExport what;
  what.model = &m->spec.model;
  what.loss = m->spec.loss;
  what.params = m->params;
  what.preprocessing = m->preprocessing.get();
  what.metadata = {{"producer", "pstrain"}, {"model", id}};
  if (!m->class_names.empty()) what.metadata.emplace_back(std::string(kClassNamesKey), class_names_json(m->class_names));
  if (step) what.metadata.emplace_back("step", std::to_string(*step));
  if (m->preprocessing && m->preprocessing->text) {
    // A text model: the graph takes the tokenizer's output ("input": token indices as floats, or
    // the multi_hot / count / tf_idf vector); the fitted tokenizer travels in the metadata for the
    // client to apply (pstrain.text in the Python client).
    what.preprocessing = nullptr;
    what.metadata.emplace_back("pstrain.tokenizer", fitted_tokenizer_to_json(*m->preprocessing->text));
  }
  if (m->preprocessing) {
    // A table's text columns: the graph takes each one's tokenizer output as its input; the
    // fitted tokenizers travel in the metadata the same way, one per column.
    for (const FittedTextColumn& t : m->preprocessing->text_columns) {
      what.metadata.emplace_back("pstrain.tokenizer." + t.name, fitted_tokenizer_to_json(*t.tokenizer));
    }
  }
  if (!m->spec.dataset.name.empty()) {
    what.metadata.emplace_back("dataset", m->spec.dataset.name);
    if (const std::optional<DatasetRecord> d = catalog_.get(m->spec.dataset.name)) {
      if (const auto train = d->splits.find("train"); train != d->splits.end() && !train->second.files.empty()) {
        what.metadata.emplace_back("dataset_sha256", train->second.files.front().sha256);
      }
    }
    what.metadata.emplace_back("spec", job_spec_to_json(m->spec));
  }
  what.input_scale = input_scale(m->input_dtype);  // raw inputs, scaled inside (model_inputs.h)
  what.metadata.emplace_back(std::string(kInputDtypeKey), std::string(dtype_name(m->input_dtype)));
  what.metadata.emplace_back("input_scale", std::to_string(what.input_scale));
  std::string bytes;
  try {
    bytes = export_onnx(what);
  } catch (const SpecError& e) {
    return failed(service_error(422, "export-unsupported", e.what(), e.path()));
  }
  Result r;
  r.content_type = "application/octet-stream";
  r.filename = id + (step ? "-step-" + std::to_string(*step) : "") + ".onnx";
  r.json = std::move(bytes);
  return r;
}

}  // namespace pstrain
