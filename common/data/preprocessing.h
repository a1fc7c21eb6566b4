// A table's preprocessing (job spec `preprocessing`): how each stored column of a table
// (table_schema.h) becomes model features, fitted once per job on the examples it trains on and
// then applied, unchanged, to every split, to `evaluate` and to `:predict`'s records.
//
//   numeric   impute a missing value (mean, median, most_frequent or a constant), then scale:
//             standardize ((v - mean) / std, population std; std 0 scales by 1), minmax
//             ((v - min) / (max - min)) or none; one feature.
//   boolean   impute (most_frequent by default), no scaling; one feature (0 or 1).
//   categorical  one-hot: the max_categories most frequent categories of the training examples
//             (ties by name; listed by name) and an "other" feature for the rest and for
//             categories never seen in training; a missing value is imputed (most_frequent, or
//             "other" with impute constant). Or, with encode "ids", one feature holding the
//             category's slot (0 .. kept - 1 in name order, kept for other) as a float: the id an
//             `embedding` layer reads through a `slice` of the input (docs/JOB-SPEC.md).
//   Or, with encode "hash" (categorical, numeric and id columns), one feature holding the bin of
//             the value's fingerprint among `num_bins` (common/data/id_hash.h: a category or an id
//             by its text, a number as the integer at or below it, a missing value as the empty
//             string), so ids never seen in training have a bin too: Keras' `Hashing`.
//   id        (table_schema.h: more distinct strings than a categorical column holds) hashed, or
//             looked up (encode "ids": one feature, the slot of the id among the max_categories
//             most frequent ids of the training examples, sorted by fingerprint, the count of
//             kept ids for every other id and for a missing one; counted by TopIds, exact while
//             the examples hold at most max(4 x max_categories, 65,536) distinct ids), or
//             dropped; no default (a job must say which).
//             A categorical column with `separator` is multi-valued (tags, a user's last items:
//             "drama|comedy"): its cell is split on the separator (pieces trimmed of spaces, empty
//             ones skipped) and gives `max_values` features, the first pieces' bins in cell order,
//             then -1 (padding: an `embedding` with a `combiner` skips it); a missing cell has no
//             pieces. Such a column cannot be crossed.
//   Crosses (`crosses`): one feature per cross, the bin among `num_bins` of the crossed columns'
//             fingerprints folded left in the listed order (TF's crossed column), after every
//             column's features; a cross may use dropped columns.
//   Any column may add a missing indicator (1 where the value was missing): by default for every
//   column with a missing value in the dataset's train split, so the width is known at submit.
//   A column may be dropped.
// Defaults (the spec says nothing): numeric standardize + mean + indicator; boolean
// most_frequent + indicator; categorical one-hot of up to 20 categories + most_frequent +
// indicator.
//
// The fitted form holds float32 constants computed in double from the training examples in
// example order (a pure function of the examples: N workers, one worker and pstrain-train fit the
// same), and the arithmetic applying it is float32 in a fixed order.
//
// Thread rules: plain values and pure functions.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/data/table_schema.h"
#include "common/data/tokenizer.h"

namespace boost::json {
class value;
class object;
}  // namespace boost::json

namespace pstrain {

enum class Scaling { kStandardize, kMinMax, kNone };
enum class Imputation { kMean, kMedian, kMostFrequent, kConstant };
enum class Encoding { kOneHot, kIds, kHash };  // kHash: categorical, numeric and id columns

// Most bins of a hashed column or a cross: a bin is stored as a float, exact below 2^24.
inline constexpr uint32_t kMaxHashBins = uint32_t{1} << 24;

// What the spec says for a column or a column type; unset fields fall back (column -> type
// default -> built-in default).
struct ColumnSteps {
  std::optional<Scaling> scale;
  std::optional<Imputation> impute;
  std::optional<double> fill_value;  // impute constant, numeric and boolean columns (default 0)
  std::optional<bool> indicator;
  std::optional<uint32_t> max_categories;  // categorical, at least 1
  std::optional<Encoding> encode;          // categorical (kHash: numeric too)
  std::optional<uint32_t> num_bins;        // encode "hash"
  std::optional<std::string> separator;    // encode "hash", categorical: multi-valued cells
  std::optional<uint32_t> max_values;      // with separator: the features (places) it gives
  std::optional<TokenizerSpec> text;       // a text column's tokenizer (said per column)
  bool drop = false;
};

// Most ids an id column's vocabulary keeps (encode "ids"), and the counters it may use to find them
// (top_keys.h: max(4 x max_categories, kIdCounters), at most 2^20 counters of about 80 bytes).
inline constexpr uint32_t kMaxIdVocabulary = uint32_t{1} << 18;
inline constexpr size_t kIdCounters = size_t{1} << 16;

// Most places of a multi-valued column.
inline constexpr uint32_t kMaxValues = 256;

// A feature cross: `columns` (two or more stored columns, in the order they fold) into `num_bins`.
struct CrossSpec {
  std::vector<std::string> columns;
  uint32_t num_bins = 0;
  std::string name;  // the spec's or the columns joined by "_x_"
};

struct PreprocessingSpec {
  bool given = false;  // the spec has a `preprocessing` section
  ColumnSteps numeric, boolean, categorical;
  std::map<std::string, ColumnSteps> columns;  // by column name
  std::vector<CrossSpec> crosses;
  // `text` (tokenizer.h): how a text dataset's documents become features; on a table, the
  // tokenizer of every text column that says none of its own (columns.<name>.text) and is not
  // dropped. A table's text column with neither is not a feature.
  std::optional<TokenizerSpec> text;
};

// The tokenizer a table's text column `name` goes through (its own, else the spec's `text`), or
// null when it is not a feature (dropped, or no tokenizer said).
const TokenizerSpec* text_steps(const PreprocessingSpec& spec, const std::string& name);

inline constexpr uint32_t kDefaultMaxCategories = 20;

// One stored column's fitted steps.
struct FittedColumn {
  std::string name;
  ColumnType type = ColumnType::kNumeric;
  bool dropped = false;
  bool indicator = false;
  // numeric and boolean: out = (value or fill - offset) * scale
  float fill = 0, offset = 0, scale = 1;
  // categorical: the one-hot features' categories, then "other"; a missing value is `fill_category`
  // (an index into categories, or categories.size(): other).
  std::vector<std::string> categories;
  uint32_t fill_category = 0;
  bool ids = false;  // categorical and id: one feature, the slot (encode "ids"), instead of one-hot or a bin
  // id with encode "ids": the kept ids' fingerprints, sorted; an id's slot is its index, or
  // vocabulary.size() for any other id and a missing one.
  std::vector<uint64_t> vocabulary;
  uint32_t bins = 0;  // encode "hash": one feature, the fingerprint's bin among `bins` (0: not hashed)
  // Multi-valued (hashed, categorical): the cell split on `separator` into `values` places.
  std::string separator;
  uint32_t values = 0;  // 0: single-valued

  uint32_t width() const;  // features it gives (0 when dropped)
};

// A table's text column, tokenized: its features follow the crosses', in the table's order of
// text columns; row i's cell is document i of the column's stored cells (text_folders.h).
struct FittedTextColumn {
  std::string name;
  std::shared_ptr<const FittedTokenizer> tokenizer;
};

// A fitted cross: indices into FittedPreprocessing::columns, in fold order.
struct FittedCross {
  std::string name;
  std::vector<uint32_t> columns;
  uint32_t bins = 0;
};

struct FittedPreprocessing {
  std::vector<FittedColumn> columns;  // the table's stored columns, in order
  std::string label;
  std::vector<std::string> class_names;  // the dataset's (empty: numbered classes or targets)
  // The table's columns that are not features (ignored, text not tokenized): a record may hold
  // them (a whole row as the table has it); their values are not used.
  std::vector<std::string> other_columns;
  std::vector<FittedCross> crosses;  // one feature each, after the columns' features
  // A text dataset's fitted tokenizer: the features are its output (no columns then).
  std::shared_ptr<const FittedTokenizer> text;
  // A table's tokenized text columns (not in other_columns): their features come last.
  std::vector<FittedTextColumn> text_columns;

  uint32_t width() const;
  // The features of the stored columns and crosses (the first of each row), and where text
  // column k's begin.
  uint32_t table_width() const;
  uint32_t text_offset(size_t k) const;
  // One name per feature: "age", "age_missing", "plan=pro", "plan=(other)", "plan=(id)",
  // "user=(hash)", "tags=(hash 0)" ... "tags=(hash 3)", "island_x_sex=(cross)"; a tokenizer's
  // "token 0" ... (int), else its vocabulary ("[UNK]", "the", ...; "" for unused places); a text
  // column's the same after "review=".
  std::vector<std::string> feature_names() const;
};

// The spec's `preprocessing` section; throws SpecError naming the field (/preprocessing/...).
PreprocessingSpec read_preprocessing(const boost::json::value& v);
boost::json::object preprocessing_to_object(const PreprocessingSpec& spec);

// Checks the spec against a table (unknown columns, steps that do not fit a column's type) and
// returns the features a fitted preprocessing gives. Throws SpecError naming the field.
uint32_t preprocessed_width(const PreprocessingSpec& spec, const TableSchema& train);

// One pass over a table's stored rows in example order: calls its argument with consecutive
// chunks (`values`: rows x the schema's row_width(), row-major: each stored column's values, the
// codes of the schema's categories, an id's two).
using RowChunk = std::function<void(std::span<const float> values, size_t rows)>;
using RowPass = std::function<void(const RowChunk&)>;

// Fits on the examples of a stored split that a job trains on, streaming: `rows` is run once to
// three times (a second pass for median imputation, a third for standardization), holding a few
// numbers per column, category counts, 768 KiB per median-imputed column and, for a numeric
// column imputed most_frequent, a count per distinct value. The result is a pure function of the
// values in example order (sums in double in that order, the fills after the present values, an
// exact median). `train_schema` is the dataset's train split's (its missing counts decide the
// default indicators, as preprocessed_width does).
FittedPreprocessing fit_preprocessing(const PreprocessingSpec& spec, const TableSchema& schema,
                                      const TableSchema& train_schema, const RowPass& rows);
// The same over rows in memory.
FittedPreprocessing fit_preprocessing(const PreprocessingSpec& spec, const TableSchema& schema,
                                      const TableSchema& train_schema, std::span<const float> values, size_t rows);

// Applies the fitted steps to stored rows (rows x the schema's row_width() values) whose categorical
// codes are `schema`'s (any split of the dataset): `out` gets rows x width() floats, row-major;
// the text columns' features (stored apart) are zeros, for apply_text_cell to fill.
void apply_preprocessing(const FittedPreprocessing& fitted, const TableSchema& schema, std::span<const float> values,
                         size_t rows, float* out);

// `schema`'s category codes mapped once, for a reader that applies the steps batch after batch:
// for each stored column, each code's slot (its one-hot slot, categories.size() for other; a
// multi-valued column's `values` bins, kNoBin for padding) and, for categorical columns, each
// code's fingerprint (hashing, crosses).
inline constexpr uint32_t kNoBin = UINT32_MAX;
struct CategorySlots {
  std::vector<std::vector<uint32_t>> slots;         // per stored column (empty: not categorical)
  std::vector<std::vector<uint64_t>> fingerprints;  // per stored column (empty: not categorical)
};
CategorySlots category_slots(const FittedPreprocessing& fitted, const TableSchema& schema);
void apply_preprocessing(const FittedPreprocessing& fitted, const CategorySlots& slots, std::span<const float> values,
                         size_t rows, float* out);

// Text column k's features of the row whose cell is `cell` (its UTF-8 text; empty when missing)
// into `row` (the row's width() features).
void apply_text_cell(const FittedPreprocessing& fitted, size_t k, std::string_view cell, float* row);

// Applies them to one record by field name (`:predict`): numbers (or numeric text) for numeric
// columns, text or numbers for categorical ones (an unseen one is "other", or its own bin when
// hashed), true/false/yes/no or
// 0/1 for boolean ones; null or a missing-value text is missing; a tokenized text column's cell
// as a string (null: empty). A text model's record is {"text": "..."}. Every column (dropped ones too)
// must be a field; the label's field is allowed and ignored. Throws DataError naming the field for
// a missing field, a field the table does not have, or a value of the wrong kind.
void apply_preprocessing(const FittedPreprocessing& fitted, const boost::json::object& record, float* out);

// The fitted form as JSON (kept in the model file's metadata and in checkpoints); from_json throws
// DataError naming the field.
std::string fitted_to_json(const FittedPreprocessing& fitted);
FittedPreprocessing fitted_from_json(const std::string& text);

}  // namespace pstrain
