// A job spec against its dataset (job_spec.h check_spec_against_dataset): the input shape, the
// loss against the labels or targets, the output layer's width, early stopping's and the plateau
// rule's monitors and the
// class weights, each a SpecError naming the field.
#include <boost/json.hpp>

#include <string>
#include <vector>

#include "common/base/error.h"
#include "common/base/json_parse.h"
#include "common/data/dataset.h"
#include "common/data/job_spec.h"
#include "common/data/preprocessing.h"
#include "common/data/table_schema.h"

namespace pstrain {

namespace {

// "28x28x1 images" for an image dataset, "[30] features" for a flat one.
std::string describe_examples(const Shape& shape) {
  if (shape.size() != 3) return shape_string(shape) + " features";
  return std::to_string(shape[0]) + "x" + std::to_string(shape[1]) + "x" + std::to_string(shape[2]) + " images";
}

// Early stopping's or the plateau rule's monitor (`field`) must be a figure the job's epochs have.
void check_monitor(const JobSpec& spec, const std::string& monitor, const std::string& field, uint32_t num_classes,
                   uint32_t target_width) {
  const bool regression = is_regression(spec.loss);
  const bool binary = spec.loss.type == LossType::kBinaryCrossEntropy;
  // val_* figures are those of test_* on the held-out part.
  const std::string m = monitor.starts_with("val_") ? "test_" + monitor.substr(4) : monitor;
  std::string why;
  if (regression && (m.find("accuracy") != std::string::npos || m == "test_auc")) {
    why = "a regression job's epochs have no " + monitor + " (they have mae, rmse and r2 figures)";
  } else if (!regression && (m == "test_mae" || m == "test_rmse" || m == "test_r2")) {
    why = monitor + " is a regression figure; this job's loss is " + loss_type_name(spec.loss.type);
  } else if (m == "test_auc" && !binary) {
    why = monitor + " is a binary_cross_entropy job's figure";
  } else if (m == "test_top5_accuracy" && (binary || target_width > 0 || num_classes <= 5)) {
    why = monitor + " needs more than 5 classes";
  }
  if (!why.empty()) throw SpecError(field, why);
}

// The checks of check_spec_against_dataset; `example_shape` empty skips the input shape's.
void check_against(const JobSpec& spec, const std::string& dataset, const Shape& example_shape, uint32_t num_classes,
                   uint32_t target_width) {
  const std::vector<Shape> shapes = infer_shapes(spec.model);
  const Shape& input = spec.model.input_shape;
  const bool flat_of_images = input.size() == 1 && input[0] == num_elements(example_shape);
  if (!example_shape.empty() && input != example_shape && !flat_of_images) {
    throw SpecError("/model/input_shape", shape_string(input) + " does not match " + dataset + "'s " +
                                              describe_examples(example_shape));
  }
  if (spec.early_stopping.enabled) {
    check_monitor(spec, spec.early_stopping.monitor, "/early_stopping/monitor", num_classes, target_width);
  }
  if (spec.reduce_on_plateau.enabled) {
    check_monitor(spec, spec.reduce_on_plateau.monitor, "/reduce_on_plateau/monitor", num_classes, target_width);
  }
  const Shape& out = shapes.back();
  const std::string last = "/model/layers/" + std::to_string(spec.model.layers.size() - 1);
  const bool multi_label = spec.loss.type == LossType::kBinaryCrossEntropy && target_width > 0;
  if (!multi_label && is_regression(spec.loss) != (target_width > 0)) {
    throw SpecError("/loss", is_regression(spec.loss)
                                 ? std::string(loss_type_name(spec.loss.type)) + " needs a dataset of float targets, but " +
                                       dataset + " has class labels (" + std::to_string(num_classes) + " classes)"
                                 : std::string(loss_type_name(spec.loss.type)) + " needs class labels, but " + dataset +
                                       " has float targets (regression: use mean_squared_error, mean_absolute_error "
                                       "or huber)");
  }
  if (target_width > 0) {
    if (out.size() != 1 || out[0] != target_width) {
      throw SpecError(last, "must output " + std::to_string(target_width) +
                                (multi_label ? " logit(s) (the labels of " : " value(s) (the targets of ") + dataset +
                                ") but outputs " + shape_string(out));
    }
    return;
  }
  if (spec.loss.type == LossType::kBinaryCrossEntropy && num_classes != 2) {
    throw SpecError("/loss", "binary_cross_entropy needs a dataset of 2 classes (labels 0 and 1), but " + dataset +
                                 " has " + std::to_string(num_classes));
  }
  const int64_t outputs = loss_outputs(spec.loss, num_classes);
  if (out.size() != 1 || out[0] != outputs) {
    const std::string what = spec.loss.type == LossType::kBinaryCrossEntropy
                                 ? "1 logit (binary_cross_entropy on " + dataset + "'s 2 classes)"
                                 : std::to_string(num_classes) + " logits (the classes of " + dataset + ")";
    throw SpecError(last, "must output " + what + " but outputs " + shape_string(out));
  }
}

}  // namespace

void check_spec_against_dataset(const JobSpec& spec, const DatasetInfo& info) {
  check_class_weight(spec.training.class_weight, spec.loss, info.name, info.num_classes, info.target_width,
                     info.table ? info.table->class_names : std::vector<std::string>{});
  if (info.table) {
    // A table: the model's input is the preprocessed features.
    const uint32_t width = preprocessed_width(spec.preprocessing, *info.table);
    try {
      check_against(spec, info.name, {static_cast<int64_t>(width)}, info.num_classes, info.target_width);
    } catch (const SpecError& e) {
      if (e.path() != "/model/input_shape") throw;
      throw SpecError(e.path(), e.detail() + " after preprocessing (preprocessing.h; /preprocessing)");
    }
    return;
  }
  if (info.text) {
    // Documents: the model's input is the tokenizer's output.
    if (!spec.preprocessing.text) {
      throw SpecError("/preprocessing/text", "is required: " + info.name + " holds text documents, and the tokenizer says how "
                      "they become features (docs/JOB-SPEC.md \"Text\")");
    }
    if (!spec.preprocessing.columns.empty() || !spec.preprocessing.crosses.empty()) {
      throw SpecError(spec.preprocessing.columns.empty() ? "/preprocessing/crosses" : "/preprocessing/columns",
                      "applies to a table; " + info.name + " holds text documents");
    }
    try {
      check_against(spec, info.name, {static_cast<int64_t>(spec.preprocessing.text->width())}, info.num_classes, info.target_width);
    } catch (const SpecError& e) {
      if (e.path() != "/model/input_shape") throw;
      throw SpecError(e.path(), e.detail() + " after the tokenizer (/preprocessing/text)");
    }
    return;
  }
  if (spec.preprocessing.given) {
    throw SpecError("/preprocessing", "applies to a table (a CSV upload) or text; " + info.name + " holds arrays or images");
  }
  check_against(spec, info.name, info.example_shape, info.num_classes, info.target_width);
}

void check_spec_against_dataset(const JobSpec& spec, const Split& split) {
  check_class_weight(spec.training.class_weight, spec.loss, split.dataset, split.num_classes, split.target_width,
                     split.table ? split.table->class_names : std::vector<std::string>{});
  check_against(spec, split.dataset, split.example_shape(), split.num_classes, split.target_width);
}

std::string spec_dataset_name(const std::string& spec_json) {
  boost::system::error_code ec;
  const boost::json::value v = parse_json(spec_json, ec);
  if (ec || !v.is_object()) return {};
  const auto* dataset = v.as_object().if_contains("dataset");
  const auto* name = dataset != nullptr && dataset->is_object() ? dataset->as_object().if_contains("name") : nullptr;
  return name != nullptr && name->is_string() ? std::string(name->as_string()) : std::string();
}

std::string with_inferred_input_shape(const std::string& spec_json, const DatasetInfo& info) {
  boost::system::error_code ec;
  boost::json::value v = parse_json(spec_json, ec);
  if (ec || !v.is_object()) return spec_json;
  boost::json::object& root = v.as_object();
  boost::json::value* model = root.if_contains("model");
  if (model == nullptr || !model->is_object() || model->as_object().contains("input_shape")) return spec_json;
  boost::json::array shape;
  if (info.table || info.text) {
    PreprocessingSpec preprocessing;
    try {
      if (const boost::json::value* p = root.if_contains("preprocessing")) preprocessing = read_preprocessing(*p);
      if (info.text && !preprocessing.text) return spec_json;  // the check says the tokenizer is required
      shape.push_back(info.text ? preprocessing.text->width() : preprocessed_width(preprocessing, *info.table));
    } catch (const std::exception&) {
      return spec_json;  // the parse says what is wrong with the preprocessing
    }
  } else {
    if (info.example_shape.empty()) return spec_json;
    for (int64_t d : info.example_shape) shape.push_back(d);
  }
  model->as_object()["input_shape"] = std::move(shape);
  return boost::json::serialize(v);
}

}  // namespace pstrain
