// Fitting and applying a table's preprocessing (preprocessing.h).
#include "common/data/preprocessing.h"

#include <boost/json.hpp>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <map>
#include <unordered_map>

#include "common/base/error.h"

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

namespace {

// A column's steps: the column's own, else its type's, else the built-in defaults.
struct Resolved {
  Scaling scale = Scaling::kNone;
  Imputation impute = Imputation::kMostFrequent;
  double fill_value = 0;
  bool indicator = true;
  uint32_t max_categories = kDefaultMaxCategories;
  Encoding encode = Encoding::kOneHot;
  bool drop = false;
};

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

FittedPreprocessing fit_preprocessing(const PreprocessingSpec& spec, const TableSchema& schema,
                                      const TableSchema& train_schema, std::span<const float> values, size_t rows) {
  FittedPreprocessing fitted;
  fitted.label = schema.label;
  fitted.class_names = schema.class_names;
  for (const TableColumn& c : schema.columns) {
    if (c.type == ColumnType::kIgnored || c.type == ColumnType::kText) fitted.other_columns.push_back(c.name);
  }
  const std::vector<const TableColumn*> stored = schema.stored_columns();
  const std::vector<const TableColumn*> train_stored = train_schema.stored_columns();
  const size_t width = stored.size();
  for (size_t k = 0; k < width; ++k) {
    const TableColumn& column = *stored[k];
    const Resolved r = resolve(spec, column);
    FittedColumn f;
    f.name = column.name;
    f.type = column.type;
    f.dropped = r.drop;
    f.ids = column.type == ColumnType::kCategorical && r.encode == Encoding::kIds;
    f.indicator = r.indicator && k < train_stored.size() && train_stored[k]->profile.missing > 0;
    if (f.dropped) {
      fitted.columns.push_back(std::move(f));
      continue;
    }
    std::vector<double> present;
    present.reserve(rows);
    for (size_t i = 0; i < rows; ++i) {
      const float v = values[i * width + k];
      if (!std::isnan(v)) present.push_back(v);
    }
    if (column.type == ColumnType::kCategorical) {
      // Counts by category name (this split's codes name them).
      std::map<std::string, uint64_t> counts;
      for (double v : present) ++counts[column.categories.at(static_cast<size_t>(v))];
      std::vector<std::pair<std::string, uint64_t>> ranked(counts.begin(), counts.end());
      std::stable_sort(ranked.begin(), ranked.end(), [](const auto& a, const auto& b) { return a.second > b.second; });
      if (ranked.size() > r.max_categories) ranked.resize(r.max_categories);
      for (const auto& [name, n] : ranked) f.categories.push_back(name);
      std::sort(f.categories.begin(), f.categories.end());
      f.fill_category = static_cast<uint32_t>(f.categories.size());  // other
      if (r.impute == Imputation::kMostFrequent && !ranked.empty()) {
        f.fill_category = static_cast<uint32_t>(
            std::lower_bound(f.categories.begin(), f.categories.end(), ranked.front().first) - f.categories.begin());
      }
      fitted.columns.push_back(std::move(f));
      continue;
    }
    // Numeric and boolean: the fill value, then the scaling of the filled values.
    double fill = r.fill_value;
    if (!present.empty()) {
      switch (r.impute) {
        case Imputation::kMean: {
          double sum = 0;
          for (double v : present) sum += v;
          fill = sum / static_cast<double>(present.size());
          break;
        }
        case Imputation::kMedian: {
          std::vector<double> sorted = present;
          std::sort(sorted.begin(), sorted.end());
          const size_t n = sorted.size();
          fill = n % 2 ? sorted[n / 2] : (sorted[n / 2 - 1] + sorted[n / 2]) / 2;
          break;
        }
        case Imputation::kMostFrequent: {
          std::map<double, uint64_t> counts;
          for (double v : present) ++counts[v];
          uint64_t best = 0;
          for (const auto& [v, n] : counts) {
            if (n > best) best = n, fill = v;  // ties: the smallest value
          }
          break;
        }
        case Imputation::kConstant: break;
      }
    }
    f.fill = static_cast<float>(fill);
    const Scaling scale = r.scale;
    if (scale != Scaling::kNone) {
      // Over the training values as the model sees them: the present ones and the fills.
      std::vector<double> filled = present;
      filled.resize(rows, static_cast<double>(f.fill));
      if (scale == Scaling::kStandardize) {
        double sum = 0;
        for (double v : filled) sum += v;
        const double mean = filled.empty() ? 0 : sum / static_cast<double>(filled.size());
        double sq = 0;
        for (double v : filled) sq += (v - mean) * (v - mean);
        const double std = filled.empty() ? 0 : std::sqrt(sq / static_cast<double>(filled.size()));
        f.offset = static_cast<float>(mean);
        f.scale = std > 0 ? static_cast<float>(1.0 / std) : 1.0f;
      } else {
        const auto [lo, hi] = std::minmax_element(filled.begin(), filled.end());
        const double min = filled.empty() ? 0 : *lo, max = filled.empty() ? 0 : *hi;
        f.offset = static_cast<float>(min);
        f.scale = max > min ? static_cast<float>(1.0 / (max - min)) : 1.0f;
      }
    }
    fitted.columns.push_back(std::move(f));
  }
  return fitted;
}

namespace {

// For each stored column of `schema`, its codes' one-hot slots under `fitted` (categories.size():
// other); empty for other columns.
std::vector<std::vector<uint32_t>> slots_of(const FittedPreprocessing& fitted, const TableSchema& schema) {
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
  const std::vector<std::vector<uint32_t>> slots = slots_of(fitted, schema);
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
