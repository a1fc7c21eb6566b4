// Fitting and applying a table's preprocessing (preprocessing.h).
#include "common/data/preprocessing.h"

#include <boost/json.hpp>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <limits>
#include <map>
#include <unordered_map>

#include "common/base/error.h"
#include "common/data/id_hash.h"
#include "common/data/preprocessing_steps.h"

namespace pstrain {
namespace json = boost::json;

uint32_t FittedColumn::width() const {
  if (dropped) return 0;
  const uint32_t values = bins > 0 && this->values > 0                       ? this->values
                          : type == ColumnType::kCategorical && !ids && bins == 0 ? static_cast<uint32_t>(categories.size()) + 1
                                                                                   : 1;
  return values + (indicator ? 1 : 0);
}

uint32_t FittedPreprocessing::table_width() const {
  if (text) return text->spec.width();
  uint32_t w = 0;
  for (const FittedColumn& c : columns) w += c.width();
  return w + static_cast<uint32_t>(crosses.size());
}

uint32_t FittedPreprocessing::text_offset(size_t k) const {
  uint32_t at = table_width();
  for (size_t j = 0; j < k; ++j) at += text_columns.at(j).tokenizer->spec.width();
  return at;
}

uint32_t FittedPreprocessing::width() const { return text_offset(text_columns.size()); }

const TokenizerSpec* text_steps(const PreprocessingSpec& spec, const std::string& name) {
  const auto it = spec.columns.find(name);
  if (it != spec.columns.end() && it->second.drop) return nullptr;
  if (it != spec.columns.end() && it->second.text) return &*it->second.text;
  return spec.text ? &*spec.text : nullptr;
}

namespace {

// A tokenizer's feature names: "token 0", ... (int), else its vocabulary ("[UNK]", ...).
void tokenizer_feature_names(const FittedTokenizer& t, const std::string& prefix, std::vector<std::string>& names) {
  if (t.spec.output_mode == TextOutput::kInt) {
    for (uint32_t i = 0; i < t.spec.width(); ++i) names.push_back(prefix + "token " + std::to_string(i));
    return;
  }
  const size_t first = names.size();
  names.resize(first + t.spec.width(), prefix);
  names[first] = prefix + "[UNK]";
  for (size_t i = 0; i < t.vocabulary.size(); ++i) names[first + t.spec.reserved() + i] = prefix + t.vocabulary[i];
}

}  // namespace

std::vector<std::string> FittedPreprocessing::feature_names() const {
  std::vector<std::string> names;
  if (text) tokenizer_feature_names(*text, "", names);
  for (const FittedColumn& c : columns) {
    if (c.dropped) continue;
    if (c.bins > 0 && c.values > 0) {
      for (uint32_t j = 0; j < c.values; ++j) names.push_back(c.name + "=(hash " + std::to_string(j) + ")");
    } else if (c.bins > 0) {
      names.push_back(c.name + "=(hash)");
    } else if ((c.type == ColumnType::kCategorical || c.type == ColumnType::kId) && c.ids) {
      names.push_back(c.name + "=(id)");
    } else if (c.type == ColumnType::kCategorical) {
      for (const std::string& k : c.categories) names.push_back(c.name + "=" + k);
      names.push_back(c.name + "=(other)");
    } else {
      names.push_back(c.name);
    }
    if (c.indicator) names.push_back(c.name + "_missing");
  }
  for (const FittedCross& x : crosses) names.push_back(x.name + "=(cross)");
  for (const FittedTextColumn& t : text_columns) tokenizer_feature_names(*t.tokenizer, t.name + "=", names);
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
    if (s.num_bins) r.num_bins = *s.num_bins;
    if (s.separator) r.separator = *s.separator;
    if (s.max_values) r.max_values = *s.max_values;
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
  if (s.text) throw SpecError(path + "/text", "'" + column.name + "' is " + column_type_name(column.type) + ", not a text column");
  const bool hashed = s.encode == Encoding::kHash;
  if (hashed && column.type == ColumnType::kBoolean) {
    throw SpecError(path + "/encode", "'" + column.name + "' is boolean: hash a categorical or numeric (integer id) column");
  }
  if (hashed && !s.num_bins) throw SpecError(path + "/num_bins", "encode \"hash\" needs num_bins (1 to 16777216)");
  if ((s.separator || s.max_values) && (!hashed || column.type != ColumnType::kCategorical)) {
    throw SpecError(path + (s.separator ? "/separator" : "/max_values"),
                    "'" + column.name + "': a multi-valued column is a categorical column with encode \"hash\"");
  }
  if (s.separator.has_value() != s.max_values.has_value()) {
    throw SpecError(path + (s.separator ? "/max_values" : "/separator"),
                    "a multi-valued column needs both separator and max_values (1 to 256)");
  }
  if (column.type == ColumnType::kId && s.encode && !hashed && *s.encode != Encoding::kIds) {
    throw SpecError(path + "/encode", "'" + column.name +
                                          "' is an id column: it is hashed (encode \"hash\" with num_bins), looked up (encode \"ids\" "
                                          "with max_categories) or dropped");
  }
  if (hashed && (s.impute || s.scale || s.fill_value)) {
    throw SpecError(path + (s.impute ? "/impute" : s.scale ? "/scale" : "/fill_value"),
                    "'" + column.name + "' is hashed: a missing value is its own id (the empty string's bin), nothing is scaled");
  }
  if (hashed) return;
  if (s.num_bins) throw SpecError(path + "/num_bins", "applies to encode \"hash\"");
  if (column.type == ColumnType::kId) {
    if (s.impute || s.scale || s.fill_value) {
      throw SpecError(path + (s.impute ? "/impute" : s.scale ? "/scale" : "/fill_value"),
                      "'" + column.name + "' is an id column: a missing id takes the slot of unseen ids, nothing is scaled");
    }
    return;
  }
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

// A text column takes a tokenizer (`text`) or `drop`; no other column takes `text`.
void check_text_steps(const PreprocessingSpec& spec, const TableColumn& column) {
  const auto it = spec.columns.find(column.name);
  if (it == spec.columns.end()) return;
  const ColumnSteps& s = it->second;
  const std::string path = "/preprocessing/columns/" + column.name;
  if (s.text && s.drop) throw SpecError(path + "/drop", "'" + column.name + "' is given a tokenizer and dropped: say one");
  const std::pair<bool, const char*> others[] = {{s.scale.has_value(), "scale"},           {s.impute.has_value(), "impute"},
                                                 {s.fill_value.has_value(), "fill_value"}, {s.indicator.has_value(), "indicator"},
                                                 {s.max_categories.has_value(), "max_categories"}, {s.encode.has_value(), "encode"},
                                                 {s.num_bins.has_value(), "num_bins"},     {s.separator.has_value(), "separator"},
                                                 {s.max_values.has_value(), "max_values"}};
  for (const auto& [set, field] : others) {
    if (set) throw SpecError(path + "/" + field, "'" + column.name + "' is a text column: it takes a tokenizer (\"text\": {...}) or \"drop\"");
  }
}

// The crosses name stored columns, two or more, each once; returns their count.
uint32_t check_crosses(const PreprocessingSpec& spec, const TableSchema& train) {
  const auto multi_valued = [&](const std::string& name) {
    const auto it = spec.columns.find(name);
    return it != spec.columns.end() && it->second.separator.has_value();
  };
  const std::vector<const TableColumn*> stored = train.stored_columns();
  for (size_t i = 0; i < spec.crosses.size(); ++i) {
    const CrossSpec& x = spec.crosses[i];
    const std::string path = "/preprocessing/crosses/" + std::to_string(i);
    for (size_t j = 0; j < x.columns.size(); ++j) {
      const bool known = std::any_of(stored.begin(), stored.end(), [&](const TableColumn* c) { return c->name == x.columns[j]; });
      if (!known) {
        throw SpecError(path + "/columns/" + std::to_string(j), "'" + x.columns[j] + "' is not a stored feature column of the dataset");
      }
      if (multi_valued(x.columns[j])) {
        throw SpecError(path + "/columns/" + std::to_string(j), "'" + x.columns[j] + "' is multi-valued: it cannot be crossed");
      }
      if (std::find(x.columns.begin(), x.columns.begin() + static_cast<std::ptrdiff_t>(j), x.columns[j]) != x.columns.begin() + static_cast<std::ptrdiff_t>(j)) {
        throw SpecError(path + "/columns/" + std::to_string(j), "'" + x.columns[j] + "' is crossed twice");
      }
    }
    for (size_t j = 0; j < i; ++j) {
      if (spec.crosses[j].name == x.name) throw SpecError(path + "/name", "'" + x.name + "' names two crosses");
    }
  }
  return static_cast<uint32_t>(spec.crosses.size());
}

}  // namespace

uint32_t preprocessed_width(const PreprocessingSpec& spec, const TableSchema& train) {
  const std::vector<const TableColumn*> texts = train.text_columns();
  if (spec.text && texts.empty()) {
    throw SpecError("/preprocessing/text", "applies to a text dataset (class folders of .txt files) or to a table's text "
                    "columns, and this table has none");
  }
  for (const auto& entry : spec.columns) {
    const std::string& name = entry.first;
    const bool known = std::any_of(train.columns.begin(), train.columns.end(),
                                   [&](const TableColumn& c) { return c.name == name && c.type != ColumnType::kIgnored; });
    if (!known) {
      std::string names;
      for (const TableColumn* c : train.stored_columns()) names += (names.empty() ? "" : ", ") + c->name;
      for (const TableColumn* c : texts) names += (names.empty() ? "" : ", ") + c->name;
      throw SpecError("/preprocessing/columns/" + name, "'" + name + "' is not a feature column of the dataset (columns: " + names + ")");
    }
  }
  uint32_t text_width = 0;
  for (const TableColumn* c : texts) {
    check_text_steps(spec, *c);
    if (const TokenizerSpec* t = text_steps(spec, c->name)) text_width += t->width();
  }
  uint32_t width = text_width;
  for (const TableColumn* c : train.stored_columns()) {
    check_steps(spec, *c);
    const Resolved r = resolve(spec, *c);
    if (r.drop) continue;
    if (c->type == ColumnType::kId && r.encode != Encoding::kHash && r.encode != Encoding::kIds) {
      throw SpecError("/preprocessing/columns/" + c->name,
                      "'" + c->name + "' is an id column (about " + std::to_string(c->profile.distinct_estimate) +
                          " distinct values): hash it ({\"encode\": \"hash\", \"num_bins\": ...}), look it up "
                          "({\"encode\": \"ids\", \"max_categories\": ...}) or drop it (\"drop\")");
    }
    if (r.encode == Encoding::kHash && c->type == ColumnType::kBoolean) {
      throw SpecError("/preprocessing/boolean/encode", "boolean columns are not hashed");
    }
    if (r.encode == Encoding::kHash && r.num_bins == 0) {
      throw SpecError("/preprocessing/" + std::string(column_type_name(c->type)) + "/num_bins",
                      "encode \"hash\" needs num_bins (column '" + c->name + "')");
    }
    if (r.encode == Encoding::kHash && r.max_values > 0) {
      width += r.max_values;
    } else if (((c->type == ColumnType::kCategorical || c->type == ColumnType::kId) && r.encode == Encoding::kIds) ||
               r.encode == Encoding::kHash) {
      width += 1;
    } else if (c->type == ColumnType::kCategorical) {
      width += std::min<uint32_t>(r.max_categories, static_cast<uint32_t>(c->categories.size())) + 1;
    } else {
      width += 1;
    }
    if (r.indicator && c->profile.missing > 0) width += 1;
  }
  width += check_crosses(spec, train);
  if (width == 0 && !texts.empty() && !spec.text) {
    throw SpecError("/preprocessing/text", "is required: the table's only features are text columns (" + texts[0]->name +
                                               (texts.size() > 1 ? ", ..." : "") + "), which become features through a tokenizer");
  }
  if (width == 0) throw SpecError("/preprocessing", "drops every column: the model would have no input");
  return width;
}

namespace {

// Calls `each` with the first `max` non-empty pieces of `cell` split on `separator` (trimmed of
// spaces and tabs), in order; returns how many.
size_t split_values(std::string_view cell, std::string_view separator, size_t max,
                    const std::function<void(std::string_view)>& each) {
  size_t n = 0;
  size_t from = 0;
  while (n < max && from <= cell.size()) {
    const size_t at = separator.empty() ? std::string_view::npos : cell.find(separator, from);
    std::string_view piece = cell.substr(from, at == std::string_view::npos ? std::string_view::npos : at - from);
    while (!piece.empty() && (piece.front() == ' ' || piece.front() == '\t')) piece.remove_prefix(1);
    while (!piece.empty() && (piece.back() == ' ' || piece.back() == '\t')) piece.remove_suffix(1);
    if (!piece.empty()) {
      each(piece);
      ++n;
    }
    if (at == std::string_view::npos) break;
    from = at + separator.size();
  }
  return n;
}

// A multi-valued cell's `f.values` places: its pieces' bins, then kNoBin.
void value_bins(const FittedColumn& f, std::string_view cell, uint32_t* bins) {
  std::fill_n(bins, f.values, kNoBin);
  split_values(cell, f.separator, f.values, [&](std::string_view piece) { *bins++ = fingerprint_bin(string_fingerprint(piece), f.bins); });
}

}  // namespace

CategorySlots category_slots(const FittedPreprocessing& fitted, const TableSchema& schema) {
  const std::vector<const TableColumn*> stored = schema.stored_columns();
  if (stored.size() != fitted.columns.size()) {
    throw DataError("the table has " + std::to_string(stored.size()) + " stored columns, the preprocessing " +
                    std::to_string(fitted.columns.size()));
  }
  CategorySlots codes;
  codes.slots.resize(stored.size());
  codes.fingerprints.resize(stored.size());
  for (size_t k = 0; k < stored.size(); ++k) {
    const FittedColumn& f = fitted.columns[k];
    if (f.type != ColumnType::kCategorical) continue;
    for (const std::string& name : stored[k]->categories) {
      if (f.values > 0) {  // the cell's places
        const size_t at = codes.slots[k].size();
        codes.slots[k].resize(at + f.values, kNoBin);
        value_bins(f, name, &codes.slots[k][at]);
        codes.fingerprints[k].push_back(kMissingIdFingerprint);
        continue;
      }
      const auto it = std::lower_bound(f.categories.begin(), f.categories.end(), name);
      codes.slots[k].push_back(it != f.categories.end() && *it == name ? static_cast<uint32_t>(it - f.categories.begin())
                                                                       : static_cast<uint32_t>(f.categories.size()));
      codes.fingerprints[k].push_back(string_fingerprint(name));
    }
  }
  return codes;
}

namespace {

// A number's fingerprint as an id: the integer at or below it (clamped to 64 bits).
uint64_t number_fingerprint(float v) {
  const double d = std::floor(static_cast<double>(v));
  if (d <= -9.2233720368547758e18) return integer_fingerprint(std::numeric_limits<int64_t>::min());
  if (d >= 9.2233720368547758e18) return integer_fingerprint(std::numeric_limits<int64_t>::max());
  return integer_fingerprint(static_cast<int64_t>(d));
}

// A stored column's fingerprint from its values `v` (NaN: missing); a category's comes from
// `fingerprints` by code, an id's is stored.
uint64_t stored_fingerprint(const FittedColumn& f, const float* v, const std::vector<uint64_t>& fingerprints) {
  if (std::isnan(v[0])) return kMissingIdFingerprint;
  if (f.type == ColumnType::kId) {
    uint64_t fingerprint = kMissingIdFingerprint;
    return fingerprint_from_values(v[0], v[1], &fingerprint) ? fingerprint : kMissingIdFingerprint;
  }
  if (f.type != ColumnType::kCategorical) return number_fingerprint(v[0]);
  const auto code = static_cast<size_t>(v[0]);
  return code < fingerprints.size() ? fingerprints[code] : kMissingIdFingerprint;
}

// One column's features from its stored value (NaN: missing), its category's slot (when
// categorical and present), its fingerprint (when hashed) and a multi-valued cell's bins (null:
// missing).
float* apply_column(const FittedColumn& f, float v, uint32_t slot, uint64_t fingerprint, const uint32_t* bag, float* out) {
  if (f.dropped) return out;
  // A multi-valued cell is missing when it has no ids (a missing cell, "", "|", []): the one rule
  // an exported graph, which sees only the places, can follow too.
  const bool missing = f.values > 0 ? bag == nullptr || bag[0] == kNoBin : std::isnan(v);
  if (f.values > 0) {
    for (uint32_t j = 0; j < f.values; ++j) *out++ = bag == nullptr || bag[j] == kNoBin ? -1.0f : static_cast<float>(bag[j]);
  } else if (f.bins > 0) {
    *out++ = static_cast<float>(fingerprint_bin(fingerprint, f.bins));
  } else if (f.type == ColumnType::kId) {
    *out++ = static_cast<float>(missing ? f.vocabulary.size() : slot);
  } else if (f.type == ColumnType::kCategorical) {
    const uint32_t s = missing ? f.fill_category : slot;
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

// An id's slot in a looked-up id column: its index in the vocabulary, or the vocabulary's size.
uint32_t vocabulary_slot(const FittedColumn& f, uint64_t fingerprint) {
  const auto it = std::lower_bound(f.vocabulary.begin(), f.vocabulary.end(), fingerprint);
  return static_cast<uint32_t>(it != f.vocabulary.end() && *it == fingerprint ? it - f.vocabulary.begin() : f.vocabulary.size());
}

// The crosses' features from the row's fingerprints (one per column).
float* apply_crosses(const FittedPreprocessing& fitted, const uint64_t* fingerprints, float* out) {
  for (const FittedCross& x : fitted.crosses) {
    uint64_t acc = fingerprints[x.columns[0]];
    for (size_t j = 1; j < x.columns.size(); ++j) acc = cross_fingerprint(acc, fingerprints[x.columns[j]]);
    *out++ = static_cast<float>(fingerprint_bin(acc, x.bins));
  }
  return out;
}

}  // namespace

void apply_preprocessing(const FittedPreprocessing& fitted, const TableSchema& schema, std::span<const float> values,
                         size_t rows, float* out) {
  apply_preprocessing(fitted, category_slots(fitted, schema), values, rows, out);
}

void apply_preprocessing(const FittedPreprocessing& fitted, const CategorySlots& codes, std::span<const float> values,
                         size_t rows, float* out) {
  const size_t columns = fitted.columns.size();
  std::vector<size_t> at(columns);  // a column's first value in a row (an id has two)
  size_t row = 0;
  for (size_t k = 0; k < columns; ++k) {
    at[k] = row;
    row += stored_values(fitted.columns[k].type);
  }
  std::vector<uint64_t> fingerprints(columns, kMissingIdFingerprint);
  const bool any_cross = !fitted.crosses.empty();
  const uint32_t text_width = fitted.width() - fitted.table_width();  // after each row's table features
  for (size_t i = 0; i < rows; ++i) {
    for (size_t k = 0; k < columns; ++k) {
      const FittedColumn& f = fitted.columns[k];
      const float* stored = &values[i * row + at[k]];
      const float v = stored[0];
      uint32_t slot = static_cast<uint32_t>(f.categories.size());
      const uint32_t* bag = nullptr;
      if (f.type == ColumnType::kCategorical && !std::isnan(v)) {
        const auto code = static_cast<size_t>(v);
        if (f.values > 0 && code < codes.fingerprints[k].size()) bag = &codes.slots[k][code * f.values];
        else if (code < codes.slots[k].size()) slot = codes.slots[k][code];
      }
      const bool looked_up = f.type == ColumnType::kId && f.ids;
      const bool wants_fingerprint = any_cross || f.bins > 0 || looked_up;
      if (wants_fingerprint) fingerprints[k] = stored_fingerprint(f, stored, codes.fingerprints[k]);
      if (looked_up) slot = vocabulary_slot(f, fingerprints[k]);
      out = apply_column(f, v, slot, fingerprints[k], bag, out);
    }
    out = apply_crosses(fitted, fingerprints.data(), out);
    std::fill_n(out, text_width, 0.0f);
    out += text_width;
  }
}

void apply_text_cell(const FittedPreprocessing& fitted, size_t k, std::string_view cell, float* row) {
  fitted.text_columns.at(k).tokenizer->apply(cell, row + fitted.text_offset(k));
}

namespace {

bool missing_text(std::string_view s) {
  static const char* kMissing[] = {"", "NA", "N/A", "NaN", "nan", "null", "NULL", "?"};
  return std::any_of(std::begin(kMissing), std::end(kMissing), [&](const char* m) { return s == m; });
}

}  // namespace

void apply_preprocessing(const FittedPreprocessing& fitted, const json::object& record, float* out) {
  if (fitted.text) {  // a text model: {"text": "..."}
    for (const auto& field : record) {
      if (field.key() != "text") throw DataError("field '" + std::string(field.key()) + "': a text model's record has one field, \"text\"");
    }
    const json::value* text = record.if_contains("text");
    if (text == nullptr || !text->is_string()) throw DataError("field 'text' is missing or not a string (a text model's record is {\"text\": \"...\"})");
    fitted.text->apply(std::string_view(text->as_string().data(), text->as_string().size()), out);
    return;
  }
  for (const auto& field : record) {
    const bool known = std::any_of(fitted.columns.begin(), fitted.columns.end(),
                                   [&](const FittedColumn& c) { return c.name == field.key(); });
    const bool other = std::find(fitted.other_columns.begin(), fitted.other_columns.end(), field.key()) != fitted.other_columns.end() ||
                       std::any_of(fitted.text_columns.begin(), fitted.text_columns.end(),
                                   [&](const FittedTextColumn& t) { return t.name == field.key(); });
    if (!known && !other && field.key() != fitted.label) {
      std::string names;
      for (const FittedColumn& c : fitted.columns) names += (names.empty() ? "" : ", ") + c.name;
      for (const FittedTextColumn& t : fitted.text_columns) names += (names.empty() ? "" : ", ") + t.name;
      throw DataError("field '" + std::string(field.key()) + "' is not a column of the model's table (columns: " + names + ")");
    }
  }
  std::vector<uint64_t> fingerprints;
  for (const FittedColumn& f : fitted.columns) {
    const json::value* v = record.if_contains(f.name);
    if (v == nullptr) {
      throw DataError("field '" + f.name + "' is missing (every column of the model's table is needed; null says a value is missing)");
    }
    float value = std::nanf("");
    uint32_t slot = static_cast<uint32_t>(f.categories.size());
    uint64_t fingerprint = kMissingIdFingerprint;
    const auto bad = [&](const std::string& what) {
      return DataError("field '" + f.name + "': " + what);
    };
    std::vector<uint32_t> bag;
    if (f.values > 0 && !v->is_null()) {  // a cell to split, or a list of its values
      bag.assign(f.values, kNoBin);
      if (v->is_array()) {
        size_t n = 0;
        for (const json::value& e : v->as_array()) {
          if (!e.is_string() && !e.is_number()) throw bad("a list of ids holds strings or numbers, not " + json::serialize(e));
          const std::string text = e.is_string() ? std::string(e.as_string()) : json::serialize(e);
          // Each id as a piece of the cell's text would be: trimmed, empty ones skipped.
          split_values(text, "", 1, [&](std::string_view id) {
            if (n < f.values) bag[n++] = fingerprint_bin(string_fingerprint(id), f.bins);
          });
        }
      } else if (v->is_string()) {
        if (missing_text(v->as_string())) bag.clear();  // missing, as the stored cell would be
        else value_bins(f, v->as_string(), bag.data());
      } else {
        throw bad("must be a list of ids or a string of them split by '" + f.separator + "', not " + json::serialize(*v));
      }
      if (!bag.empty()) value = 0;
    } else if (v != nullptr && !v->is_null()) {
      if (f.type == ColumnType::kCategorical || f.type == ColumnType::kId) {
        std::string text;
        if (v->is_string()) text = std::string(v->as_string());
        else if (v->is_number() || v->is_bool()) text = json::serialize(*v);
        else throw bad("must be " + std::string(f.type == ColumnType::kId ? "an id" : "a category") + " (a string), not " + json::serialize(*v));
        if (!missing_text(text)) {
          const auto it = std::lower_bound(f.categories.begin(), f.categories.end(), text);
          if (it != f.categories.end() && *it == text) slot = static_cast<uint32_t>(it - f.categories.begin());
          fingerprint = string_fingerprint(text);
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
      const bool number = f.type == ColumnType::kNumeric || f.type == ColumnType::kBoolean;
      if (number && !std::isnan(value) && !std::isfinite(value)) throw bad("is not a finite float32");
      if (number && !std::isnan(value)) fingerprint = number_fingerprint(value);
    }
    fingerprints.push_back(fingerprint);
    if (f.type == ColumnType::kId && f.ids) slot = vocabulary_slot(f, fingerprint);
    out = apply_column(f, value, slot, fingerprint, bag.empty() ? nullptr : bag.data(), out);
  }
  float* const row = apply_crosses(fitted, fingerprints.data(), out) - fitted.table_width();
  for (size_t k = 0; k < fitted.text_columns.size(); ++k) {
    const std::string& name = fitted.text_columns[k].name;
    const json::value* v = record.if_contains(name);
    if (v == nullptr) throw DataError("field '" + name + "' is missing (the model reads this text column; null for no text)");
    if (!v->is_string() && !v->is_null()) throw DataError("field '" + name + "': a text column's cell is a string, not " + json::serialize(*v));
    // A missing-value spelling is an empty cell, as the table's upload stores it.
    const std::string_view cell = v->is_null() ? std::string_view() : std::string_view(v->as_string().data(), v->as_string().size());
    apply_text_cell(fitted, k, missing_text(cell) ? std::string_view() : cell, row);
  }
}

}  // namespace pstrain
