// What a table (a CSV or JSON Lines upload) holds, column by column: each feature column's type,
// its categories and its profile, and the label column's class names. A split of a table is
// stored as float32 features in column order (dataset_formats.h), one value per column:
//   numeric      the number (float32); missing: NaN
//   boolean      1 (true, yes) or 0 (false, no); missing: NaN
//   categorical  the category's index in `categories` (sorted byte-wise); missing: NaN
//   id           two values: the cell's 48-bit fingerprint (id_hash.h string_fingerprint) as its
//                high and low 24 bits; missing: NaN, NaN. Users, items, sessions: a string column
//                with more distinct values than a categorical column holds, kept whole per row
//                (nothing held per distinct value), for a job to hash (preprocessing.h).
// Text columns (free text: reviews, descriptions, e-mails) are not among those values: their
// cells are kept as UTF-8 strings beside the table (dataset_formats.h TextCellSink; the catalog
// writes them as shards of documents) and profiled as text (text_profile.h); a missing or empty
// cell is "" there, and counted as missing.
// so the stored form is exact and the preprocessing a job applies (standardize, impute, one-hot)
// is fitted from it and kept with the job (docs/DATASETS.md "Tables").
//
// Thread rules: plain values.
#pragma once

#include <cstdint>
#include <limits>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/data/text_profile.h"

namespace pstrain {

enum class ColumnType { kNumeric, kCategorical, kBoolean, kIgnored, kText, kId };

// "numeric", "categorical", "boolean", "ignore", "text", "id".
const char* column_type_name(ColumnType type);
std::optional<ColumnType> column_type_from_name(const std::string& name);

// Values a column of `type` takes in a stored row: 2 for an id, 0 for ignored and text, else 1.
uint32_t stored_values(ColumnType type);

// Most categories a categorical column may have (its codes stay exact in float32); a string column
// with more distinct values is read as an id (or as text when most of its values are words).
inline constexpr uint32_t kMaxCategories = 65'536;
// Most text columns a table may have (each is profiled and written on its own while it is read:
// a profiler of up to 16 MiB and a shard writer with a 1 MiB buffer).
inline constexpr size_t kMaxTextColumns = 32;
// Categories listed in a column's profile (the most frequent ones).
inline constexpr size_t kProfileTopCategories = 10;

struct ColumnProfile {
  uint64_t missing = 0;
  // numeric (over the present values; NaN when none is): min, max, mean, sample std (n - 1),
  // as pandas' describe.
  static constexpr double kNone = std::numeric_limits<double>::quiet_NaN();
  double min = kNone, max = kNone, mean = kNone, std = kNone;
  // categorical and boolean: the most frequent values with their counts (by count, then name).
  std::vector<std::pair<std::string, uint64_t>> top;
  // id: the distinct present values, estimated (HyperLogLog of 16,384 registers: about 0.8%
  // relative error; exact counting would hold every value).
  uint64_t distinct_estimate = 0;
  // text: the present cells as documents.
  std::optional<TextProfile> text;
};

struct TableColumn {
  std::string name;
  ColumnType type = ColumnType::kNumeric;
  std::vector<std::string> categories;  // categorical: this split's categories, in code order
  ColumnProfile profile;
};

struct TableSchema {
  char separator = ',';
  std::vector<TableColumn> columns;  // the feature columns in file order, ignored ones included
  std::string label;                 // the label column's name
  // Classes named in the file (string labels), in class-index order; empty when the labels are
  // class numbers or regression targets.
  std::vector<std::string> class_names;
  uint64_t rows = 0;

  // The feature columns stored as values (every column but the ignored and text ones), in order.
  std::vector<const TableColumn*> stored_columns() const;
  // Values in a stored row: the stored columns' stored_values, summed.
  uint32_t row_width() const;
  // The text columns, in order.
  std::vector<const TableColumn*> text_columns() const;
  // True when a stored column is categorical or an id or has a missing value: training on the raw stored
  // values would be wrong, so a job needs the preprocessing that turns them into features.
  bool needs_preprocessing() const;
};

// Computes every stored column's profile from stored rows (the values above), so a split's
// profile is the same whether it was parsed from text or cut from another split.
class TableProfiler {
 public:
  explicit TableProfiler(const TableSchema& schema);
  // One row: each stored column's values (stored_values), in order.
  void add(const float* row);
  // The schema with this split's profile and row count.
  TableSchema finish() const;

 private:
  struct Moments {
    uint64_t n = 0;
    double mean = 0, m2 = 0, min = 0, max = 0;
  };
  TableSchema schema_;
  std::vector<size_t> stored_;  // stored column -> index in schema_.columns
  std::vector<size_t> offset_;  // stored column -> its first value in a row
  std::vector<uint64_t> missing_;
  std::vector<Moments> moments_;
  std::vector<std::vector<uint64_t>> counts_;  // per code (categorical) or {false, true}
  std::vector<std::vector<uint8_t>> registers_;  // id: HyperLogLog registers (empty otherwise)
  uint64_t rows_ = 0;
};

// The JSON form kept beside a stored split (`<split>-table-*.json`) and shown (with the profile)
// in GET /v1/datasets/{name}. table_from_json throws DataError naming the field.
std::string table_to_json(const TableSchema& table);
TableSchema table_from_json(const std::string& text, const std::string& source);

}  // namespace pstrain
