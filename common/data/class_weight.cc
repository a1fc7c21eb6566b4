// training.class_weight (class_weight.h): read strictly, written back, checked against the
// dataset's labels and resolved against the training examples.
#include "common/data/class_weight.h"

#include <cmath>
#include <optional>

#include "common/base/error.h"
#include "common/data/dataset.h"
#include "common/data/spec_reader.h"
#include "common/data/table_schema.h"

namespace pstrain {
namespace {

constexpr const char* kPath = "/training/class_weight";
constexpr double kMaxWeight = 1e6;

// The class a by_class key names: a class name, else a class index ("0" .. num_classes - 1).
std::optional<uint32_t> class_of_key(const std::string& key, uint32_t num_classes,
                                     const std::vector<std::string>& class_names) {
  for (size_t c = 0; c < class_names.size(); ++c) {
    if (class_names[c] == key) return static_cast<uint32_t>(c);
  }
  if (key.empty() || key.size() > 9 || key.find_first_not_of("0123456789") != std::string::npos) return std::nullopt;
  const auto index = static_cast<uint32_t>(std::stoul(key));
  if (index >= num_classes || (key.size() > 1 && key[0] == '0')) return std::nullopt;
  return index;
}

std::string classes_listed(uint32_t num_classes, const std::vector<std::string>& class_names) {
  std::string out;
  const size_t shown = std::min<size_t>(num_classes, 20);
  for (size_t c = 0; c < shown; ++c) {
    out += (out.empty() ? "" : ", ") + (c < class_names.size() ? class_names[c] : std::to_string(c));
  }
  return out + (num_classes > shown ? ", ..." : "");
}

// The weights by class index (kByClass, kList), unchecked counts aside.
std::vector<float> given_weights(const ClassWeightSpec& spec, uint32_t num_classes,
                                 const std::vector<std::string>& class_names, const std::string& dataset) {
  if (spec.kind == ClassWeightSpec::Kind::kList) {
    if (spec.list.size() != num_classes) {
      throw SpecError(kPath, "lists " + std::to_string(spec.list.size()) + " weight(s) but " + dataset + " has " +
                                 std::to_string(num_classes) + " classes");
    }
    return spec.list;
  }
  std::vector<float> weights(num_classes, 1.0f);
  for (const auto& [key, weight] : spec.by_class) {
    const std::optional<uint32_t> c = class_of_key(key, num_classes, class_names);
    if (!c) {
      throw SpecError(std::string(kPath) + "/" + spec_json::escape_key(key),
                      "is not a class of " + dataset + " (classes: " + classes_listed(num_classes, class_names) + ")");
    }
    weights[*c] = static_cast<float>(weight);
  }
  return weights;
}

}  // namespace

void check_class_weight(const ClassWeightSpec& spec, const LossSpec& loss, const std::string& dataset,
                        uint32_t num_classes, uint32_t target_width, const std::vector<std::string>& class_names) {
  if (spec.kind == ClassWeightSpec::Kind::kNone) return;
  if (is_regression(loss) || target_width > 0 || num_classes == 0) {
    throw SpecError(kPath, "weighs class labels, but " + dataset +
                               " has float targets (regression or multi-label); it has no classes to weigh");
  }
  if (spec.kind != ClassWeightSpec::Kind::kBalanced) given_weights(spec, num_classes, class_names, dataset);
}

std::vector<float> resolve_class_weights(const ClassWeightSpec& spec, const LossSpec& loss, const Split& train) {
  const std::vector<std::string> no_names;
  const std::vector<std::string>& names = train.table ? train.table->class_names : no_names;
  check_class_weight(spec, loss, train.dataset, train.num_classes, train.target_width, names);
  if (spec.kind == ClassWeightSpec::Kind::kNone) return {};
  if (spec.kind != ClassWeightSpec::Kind::kBalanced) return given_weights(spec, train.num_classes, names, train.dataset);
  std::vector<int64_t> counts(train.num_classes, 0);
  for (const int32_t label : train.labels) ++counts[static_cast<size_t>(label)];
  std::vector<float> weights(train.num_classes, 1.0f);
  const double n = static_cast<double>(train.labels.size()), k = train.num_classes;
  for (size_t c = 0; c < counts.size(); ++c) {
    if (counts[c] > 0) weights[c] = static_cast<float>(n / (k * static_cast<double>(counts[c])));
  }
  return weights;
}

namespace spec_json {

ClassWeightSpec read_class_weight(const json::value& v) {
  ClassWeightSpec s;
  const std::string path = kPath;
  if (v.is_string()) {
    if (v.as_string() != "balanced") {
      throw SpecError(path, "must be \"balanced\", an object of weights by class, or a list of weights, not \"" +
                                std::string(v.as_string()) + "\"");
    }
    s.kind = ClassWeightSpec::Kind::kBalanced;
    return s;
  }
  if (v.is_array()) {
    s.kind = ClassWeightSpec::Kind::kList;
    const json::array& a = v.as_array();
    if (a.empty()) throw SpecError(path, "must list one weight per class");
    for (size_t i = 0; i < a.size(); ++i) {
      s.list.push_back(static_cast<float>(read_number(a[i], path + "/" + std::to_string(i), 0, kMaxWeight, false)));
    }
    return s;
  }
  if (!v.is_object()) {
    throw SpecError(path, "must be \"balanced\", an object of weights by class, or a list of weights, not " + kind_of(v));
  }
  s.kind = ClassWeightSpec::Kind::kByClass;
  for (const auto& [key, weight] : v.as_object()) {
    const std::string name(key);
    s.by_class.emplace_back(name, read_number(weight, path + "/" + escape_key(name), 0, kMaxWeight, false));
  }
  if (s.by_class.empty()) throw SpecError(path, "must name at least one class");
  return s;
}

json::value class_weight_to_value(const ClassWeightSpec& s) {
  switch (s.kind) {
    case ClassWeightSpec::Kind::kBalanced: return "balanced";
    case ClassWeightSpec::Kind::kByClass: {
      json::object o;
      for (const auto& [key, weight] : s.by_class) o[key] = weight;
      return o;
    }
    case ClassWeightSpec::Kind::kList: {
      json::array a;
      for (const float w : s.list) a.emplace_back(static_cast<double>(w));
      return a;
    }
    case ClassWeightSpec::Kind::kNone: break;
  }
  return nullptr;
}

}  // namespace spec_json
}  // namespace pstrain
