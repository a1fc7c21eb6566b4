// Fitting and applying a table's preprocessing (preprocessing.h).
#include "common/data/preprocessing.h"

#include <boost/json.hpp>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <map>
#include <unordered_map>

#include "common/base/error.h"
#include "common/data/preprocessing_steps.h"

namespace pstrain {
namespace json = boost::json;

uint32_t FittedColumn::width() const {
  if (dropped) return 0;
  const uint32_t values = type == ColumnType::kCategorical && !ids ? static_cast<uint32_t>(categories.size()) + 1 : 1;
  return values + (indicator ? 1 : 0);
}

uint32_t FittedPreprocessing::width() const {
  uint32_t w = 0;
  for (const FittedColumn& c : columns) w += c.width();
  return w;
}

std::vector<std::string> FittedPreprocessing::feature_names() const {
  std::vector<std::string> names;
  for (const FittedColumn& c : columns) {
    if (c.dropped) continue;
    if (c.type == ColumnType::kCategorical && c.ids) {
      names.push_back(c.name + "=(id)");
    } else if (c.type == ColumnType::kCategorical) {
      for (const std::string& k : c.categories) names.push_back(c.name + "=" + k);
      names.push_back(c.name + "=(other)");
    } else {
      names.push_back(c.name);
    }
    if (c.indicator) names.push_back(c.name + "_missing");
  }
  return names;
}

namespace preprocessing_detail {

Resolved resolve(const PreprocessingSpec& spec, const TableColumn& column) {
  Resolved r;
  const ColumnSteps* type = column.type == ColumnType::kNumeric   ? &spec.numeric
                            : column.type == ColumnType::kBoolean ? &spec.boolean
                                                                  : &spec.categorical;
  if (column.type == ColumnType::kNumeric) {
    r.scale = Scaling::kStandardize;
    r.impute = Imputation::kMean;
  }
  auto apply = [&r](const ColumnSteps& s) {
    if (s.scale) r.scale = *s.scale;
    if (s.impute) r.impute = *s.impute;
    if (s.fill_value) r.fill_value = *s.fill_value;
    if (s.indicator) r.indicator = *s.indicator;
    if (s.max_categories) r.max_categories = *s.max_categories;
    if (s.encode) r.encode = *s.encode;
    r.drop = r.drop || s.drop;
  };
  apply(*type);
  if (const auto it = spec.columns.find(column.name); it != spec.columns.end()) apply(it->second);
  return r;
}

}  // namespace preprocessing_detail

namespace {

using preprocessing_detail::Resolved;
using preprocessing_detail::resolve;

// The spec's steps for `column` must fit its type.
void check_steps(const PreprocessingSpec& spec, const TableColumn& column) {
  const auto it = spec.columns.find(column.name);
  if (it == spec.columns.end()) return;
  const ColumnSteps& s = it->second;
  const std::string path = "/preprocessing/columns/" + column.name;
  if (column.type == ColumnType::kCategorical) {
    if (s.scale) throw SpecError(path + "/scale", "'" + column.name + "' is categorical: it is one-hot encoded, not scaled");
    if (s.impute && (*s.impute == Imputation::kMean || *s.impute == Imputation::kMedian)) {
      throw SpecError(path + "/impute", "'" + column.name + "' is categorical: impute most_frequent or constant (the other bucket)");
    }
    if (s.fill_value) throw SpecError(path + "/fill_value", "'" + column.name + "' is categorical: constant imputes the other bucket");
  } else if (s.max_categories) {
    throw SpecError(path + "/max_categories", "'" + column.name + "' is " + column_type_name(column.type) + ", not categorical");
  } else if (s.encode) {
    throw SpecError(path + "/encode", "'" + column.name + "' is " + column_type_name(column.type) + ", not categorical");
  }
}

}  // namespace

uint32_t preprocessed_width(const PreprocessingSpec& spec, const TableSchema& train) {
  for (const auto& entry : spec.columns) {
    const std::string& name = entry.first;
    const bool known = std::any_of(train.columns.begin(), train.columns.end(),
                                   [&](const TableColumn& c) { return c.name == name && c.type != ColumnType::kIgnored && c.type != ColumnType::kText; });
    if (!known) {
      std::string names;
      for (const TableColumn* c : train.stored_columns()) names += (names.empty() ? "" : ", ") + c->name;
      throw SpecError("/preprocessing/columns/" + name, "'" + name + "' is not a feature column of the dataset (columns: " + names + ")");
    }
  }
  uint32_t width = 0;
  for (const TableColumn* c : train.stored_columns()) {
    check_steps(spec, *c);
    const Resolved r = resolve(spec, *c);
    if (r.drop) continue;
    if (c->type == ColumnType::kCategorical && r.encode == Encoding::kIds) {
      width += 1;
    } else if (c->type == ColumnType::kCategorical) {
      width += std::min<uint32_t>(r.max_categories, static_cast<uint32_t>(c->categories.size())) + 1;
    } else {
      width += 1;
    }
    if (r.indicator && c->profile.missing > 0) width += 1;
  }
  if (width == 0) throw SpecError("/preprocessing", "drops every column: the model would have no input");
  return width;
}

std::vector<std::vector<uint32_t>> category_slots(const FittedPreprocessing& fitted, const TableSchema& schema) {
  const std::vector<const TableColumn*> stored = schema.stored_columns();
  if (stored.size() != fitted.columns.size()) {
    throw DataError("the table has " + std::to_string(stored.size()) + " stored columns, the preprocessing " +
                    std::to_string(fitted.columns.size()));
  }
  std::vector<std::vector<uint32_t>> slots(stored.size());
  for (size_t k = 0; k < stored.size(); ++k) {
    const FittedColumn& f = fitted.columns[k];
    if (f.type != ColumnType::kCategorical) continue;
    for (const std::string& name : stored[k]->categories) {
      const auto it = std::lower_bound(f.categories.begin(), f.categories.end(), name);
      slots[k].push_back(it != f.categories.end() && *it == name ? static_cast<uint32_t>(it - f.categories.begin())
                                                                 : static_cast<uint32_t>(f.categories.size()));
    }
  }
  return slots;
}

namespace {

// One column's features from its stored value (NaN: missing); `slot` maps a category code.
float* apply_column(const FittedColumn& f, float v, const std::vector<uint32_t>* slot, float* out) {
  if (f.dropped) return out;
  const bool missing = std::isnan(v);
  if (f.type == ColumnType::kCategorical) {
    uint32_t s = f.fill_category;
    if (!missing) {
      const auto code = static_cast<size_t>(v);
      s = slot != nullptr && code < slot->size() ? (*slot)[code] : static_cast<uint32_t>(f.categories.size());
    }
    if (f.ids) {
      *out++ = static_cast<float>(s);
    } else {
      const uint32_t n = static_cast<uint32_t>(f.categories.size()) + 1;
      std::fill(out, out + n, 0.0f);
      out[s] = 1.0f;
      out += n;
    }
  } else {
    *out++ = ((missing ? f.fill : v) - f.offset) * f.scale;
  }
  if (f.indicator) *out++ = missing ? 1.0f : 0.0f;
  return out;
}

}  // namespace

void apply_preprocessing(const FittedPreprocessing& fitted, const TableSchema& schema, std::span<const float> values,
                         size_t rows, float* out) {
  apply_preprocessing(fitted, category_slots(fitted, schema), values, rows, out);
}

void apply_preprocessing(const FittedPreprocessing& fitted, const std::vector<std::vector<uint32_t>>& slots,
                         std::span<const float> values, size_t rows, float* out) {
  const size_t width = fitted.columns.size();
  for (size_t i = 0; i < rows; ++i) {
    for (size_t k = 0; k < width; ++k) out = apply_column(fitted.columns[k], values[i * width + k], &slots[k], out);
  }
}

namespace {

bool missing_text(std::string_view s) {
  static const char* kMissing[] = {"", "NA", "N/A", "NaN", "nan", "null", "NULL", "?"};
  return std::any_of(std::begin(kMissing), std::end(kMissing), [&](const char* m) { return s == m; });
}

}  // namespace

void apply_preprocessing(const FittedPreprocessing& fitted, const json::object& record, float* out) {
  for (const auto& field : record) {
    const bool known = std::any_of(fitted.columns.begin(), fitted.columns.end(),
                                   [&](const FittedColumn& c) { return c.name == field.key(); });
    const bool other = std::find(fitted.other_columns.begin(), fitted.other_columns.end(), field.key()) != fitted.other_columns.end();
    if (!known && !other && field.key() != fitted.label) {
      std::string names;
      for (const FittedColumn& c : fitted.columns) names += (names.empty() ? "" : ", ") + c.name;
      throw DataError("field '" + std::string(field.key()) + "' is not a column of the model's table (columns: " + names + ")");
    }
  }
  for (const FittedColumn& f : fitted.columns) {
    const json::value* v = record.if_contains(f.name);
    if (v == nullptr) {
      throw DataError("field '" + f.name + "' is missing (every column of the model's table is needed; null says a value is missing)");
    }
    float value = std::nanf("");
    std::vector<uint32_t> slot;
    const auto bad = [&](const std::string& what) {
      return DataError("field '" + f.name + "': " + what);
    };
    if (v != nullptr && !v->is_null()) {
      if (f.type == ColumnType::kCategorical) {
        std::string text;
        if (v->is_string()) text = std::string(v->as_string());
        else if (v->is_number() || v->is_bool()) text = json::serialize(*v);
        else throw bad("must be a category (a string), not " + json::serialize(*v));
        if (!missing_text(text)) {
          const auto it = std::lower_bound(f.categories.begin(), f.categories.end(), text);
          slot.push_back(it != f.categories.end() && *it == text ? static_cast<uint32_t>(it - f.categories.begin())
                                                                 : static_cast<uint32_t>(f.categories.size()));
          value = 0;
        }
      } else if (v->is_number()) {
        value = static_cast<float>(v->to_number<double>());
      } else if (v->is_bool()) {
        value = v->as_bool() ? 1.0f : 0.0f;
      } else if (v->is_string()) {
        const std::string text(v->as_string());
        std::string lower = text;
        for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
        double d = 0;
        const char* first = text.data() + (!text.empty() && text[0] == '+' ? 1 : 0);
        const auto [end, ec] = std::from_chars(first, text.data() + text.size(), d);
        if (missing_text(text)) {
        } else if (f.type == ColumnType::kBoolean && (lower == "true" || lower == "yes" || lower == "false" || lower == "no")) {
          value = lower == "true" || lower == "yes" ? 1.0f : 0.0f;
        } else if (ec == std::errc() && end == text.data() + text.size() && first != end) {
          value = static_cast<float>(d);
        } else {
          throw bad("'" + text + "' is not " + (f.type == ColumnType::kBoolean ? "a boolean" : "a number"));
        }
      } else {
        throw bad("must be a number, not " + json::serialize(*v));
      }
      if (f.type != ColumnType::kCategorical && !std::isnan(value) && !std::isfinite(value)) throw bad("is not a finite float32");
    }
    out = apply_column(f, value, slot.empty() ? nullptr : &slot, out);
  }
}

}  // namespace pstrain
