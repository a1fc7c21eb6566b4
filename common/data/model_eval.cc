#include "common/data/model_eval.h"

#include <boost/json.hpp>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <numeric>

#include "common/base/json_text.h"
#include "common/engine/nn/loss.h"

namespace pstrain {
namespace json = boost::json;

Evaluation evaluate_model(nn::Model<float>& model, const float* params, const Split& split) {
  const auto outputs = static_cast<size_t>(model.output_size());
  const auto classes = static_cast<size_t>(nn::loss_classes(model.loss(), model.output_size()));
  const auto input_size = static_cast<size_t>(model.input_size());
  const auto max_batch = static_cast<uint32_t>(model.max_batch());
  Evaluation e;
  e.regression = is_regression(model.loss());
  e.binary_task = model.loss().type == LossType::kBinaryCrossEntropy;
  const bool multi_label = e.binary_task && outputs > 1;  // no confusion matrix: a label per output
  if (!e.regression && !multi_label) e.confusion.assign(classes, std::vector<uint64_t>(classes, 0));
  double loss_sum = 0;
  int64_t correct = 0;
  std::vector<float> columns(input_size * max_batch);
  std::vector<float> targets(static_cast<size_t>(model.target_size()) * max_batch);
  std::vector<uint32_t> indices;
  std::vector<double> probabilities(classes);
  for (uint32_t start = 0; start < split.size; start += max_batch) {
    const uint32_t batch = std::min(split.size - start, max_batch);
    indices.resize(batch);
    std::iota(indices.begin(), indices.end(), start);
    split.gather(indices, columns.data(), targets.data());
    const auto logits = model.forward(params, columns.data(), batch);
    const nn::LossResult r = nn::compute_loss<float>(model.loss(), logits, targets.data(), nullptr, nn::LossWeights::kIgnore);
    loss_sum += r.loss_sum;
    correct += r.correct;
    e.sums += r.regression;
    e.top_k_correct += static_cast<uint64_t>(r.top_k_correct);
    e.binary += r.binary;
    if (e.regression || multi_label) continue;
    for (uint32_t c = 0; c < batch; ++c) {
      const int64_t predicted = nn::class_probabilities(model.loss(), logits.col(c).data(),
                                                        static_cast<int64_t>(outputs), probabilities.data());
      const size_t truth = e.binary_task ? (targets[c] > 0.5f ? 1 : 0) : static_cast<size_t>(targets[c]);
      ++e.confusion[truth][static_cast<size_t>(predicted)];
    }
  }
  e.examples = split.size;
  const double n = split.size;
  e.loss = n > 0 ? loss_sum / n : 0.0;
  e.accuracy = n > 0 ? static_cast<double>(correct) / n : 0.0;
  return e;
}

std::string evaluation_json(const Evaluation& e, const std::string& extra) {
  namespace json = boost::json;
  if (e.regression) {
    const std::string body = to_json_text(json::object{{"examples", e.examples},
                                                       {"loss", e.loss},
                                                       {"mae", e.sums.mae()},
                                                       {"rmse", e.sums.rmse()},
                                                       {"r2", e.sums.r2()}});
    return "{" + extra + body.substr(1);
  }
  json::array matrix, per_class;
  for (size_t t = 0; t < e.confusion.size(); ++t) {
    json::array row;
    uint64_t total = 0;
    for (uint64_t v : e.confusion[t]) {
      row.push_back(v);
      total += v;
    }
    matrix.push_back(std::move(row));
    per_class.push_back(total == 0 ? json::value(nullptr)
                                   : json::value(static_cast<double>(e.confusion[t][t]) / static_cast<double>(total)));
  }
  json::object o{{"examples", e.examples},
                 {"loss", e.loss},
                 {"accuracy", e.accuracy},
                 {"per_class_accuracy", per_class},
                 {"confusion_matrix", matrix}};
  if (e.confusion.size() > static_cast<size_t>(nn::kTopK) && e.examples > 0) {
    o["top5_accuracy"] = static_cast<double>(e.top_k_correct) / static_cast<double>(e.examples);
  }
  if (e.binary_task) o["auc"] = e.binary.auc();
  const std::string body = to_json_text(o);
  return "{" + extra + body.substr(1);
}

std::string predictions_json(nn::Model<float>& model, const float* params, const float* inputs, size_t n,
                             const std::vector<std::string>& class_names, bool table) {
  const auto outputs = model.output_size();
  const auto classes = nn::loss_classes(model.loss(), outputs);
  const auto input_size = static_cast<size_t>(model.input_size());
  const auto max_batch = static_cast<size_t>(model.max_batch());
  auto text = [](float x) {
    char buffer[32];
    return std::string(buffer, std::to_chars(buffer, buffer + sizeof buffer, x).ptr);  // shortest exact form
  };
  std::vector<double> probabilities(static_cast<size_t>(classes));
  std::string out = "{\"predictions\":[";
  for (size_t start = 0; start < n; start += max_batch) {
    const auto batch = static_cast<int64_t>(std::min(n - start, max_batch));
    const auto logits = model.forward(params, inputs + start * input_size, batch);
    for (int64_t c = 0; c < batch; ++c) {
      if (is_regression(model.loss())) {
        if (start + static_cast<size_t>(c) > 0) out += ',';
        if (table && outputs == 1) {
          out += "{\"value\":" + text(logits(0, c)) + "}";
          continue;
        }
        out += "{\"values\":[";
        for (int64_t k = 0; k < outputs; ++k) out += (k > 0 ? "," : "") + text(logits(k, c));
        out += "]}";
        continue;
      }
      if (model.loss().type == LossType::kBinaryCrossEntropy && outputs > 1) {  // multi-label
        if (start + static_cast<size_t>(c) > 0) out += ',';
        std::string labels = "[", probabilities_text = "[";
        for (int64_t k = 0; k < outputs; ++k) {
          const double p = 1.0 / (1.0 + std::exp(-static_cast<double>(logits(k, c))));
          labels += std::string(k > 0 ? "," : "") + (logits(k, c) > 0.0f ? "1" : "0");
          probabilities_text += (k > 0 ? "," : "") + text(static_cast<float>(p));
        }
        out += "{\"labels\":" + labels + "],\"probabilities\":" + probabilities_text + "]}";
        continue;
      }
      const int64_t best = nn::class_probabilities(model.loss(), logits.col(c).data(), outputs, probabilities.data());
      if (start + static_cast<size_t>(c) > 0) out += ',';
      if (class_names.size() == static_cast<size_t>(classes)) {
        // Named classes (a table's): the class by name, probabilities by name.
        out += "{\"class\":" + json::serialize(json::value(class_names[static_cast<size_t>(best)])) + ",\"probabilities\":{";
        for (int64_t k = 0; k < classes; ++k) {
          if (k > 0) out += ',';
          out += json::serialize(json::value(class_names[static_cast<size_t>(k)])) + ":" +
                 text(static_cast<float>(probabilities[static_cast<size_t>(k)]));
        }
        out += "}}";
        continue;
      }
      out += "{\"class\":" + std::to_string(best) + ",\"probabilities\":[";
      for (int64_t k = 0; k < classes; ++k) {
        if (k > 0) out += ',';
        out += text(static_cast<float>(probabilities[static_cast<size_t>(k)]));
      }
      out += "]}";
    }
  }
  return out + "]}";
}

}  // namespace pstrain
