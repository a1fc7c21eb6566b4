// Parsers for user-uploaded datasets: CSV text and NumPy .npy / .npz files, each turned into one
// in-memory form, ParsedExamples (examples as raw bytes with a per-example shape, plus labels).
//
// These are pure functions of their input: no files besides the .npz path they are given, no
// globals, no REST. Every defect throws DatasetFormatError (a DataError) with a machine-readable
// kind, the line and column for CSV, and a message that says what is wrong and where.
//
// Every input has a size cap (CsvOptions, NpyLimits): nothing is allocated for a claimed size
// before the claim is checked against the caps.
//
// Thread rules: the functions keep no state; any number of threads may call them at once on
// different inputs. A returned ParsedExamples is a plain value owned by the caller.
#pragma once

#include <cstdint>
#include <fstream>
#include <functional>
#include <istream>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/base/error.h"
#include "common/data/example_types.h"
#include "common/data/table_schema.h"
#include "common/data/text_profile.h"

namespace pstrain {

// A set of labelled examples, example-major.
struct ParsedExamples {
  using Dtype = pstrain::Dtype;  // the one dtype enum (example_types.h)

  std::vector<uint32_t> shape;  // per example: {d} or {h, w, c}
  Dtype dtype = Dtype::kFloat32;
  // size() * example_values() values of `dtype`, little-endian (the host order: this code only
  // builds on little-endian machines), example after example. The storage comes from operator
  // new, so it is aligned for float.
  std::vector<uint8_t> bytes;
  std::vector<int32_t> labels;  // one per example, each in [0, classes) (classification)
  uint32_t classes = 0;         // max label + 1, at least 2; 0 for regression
  // Regression: target_width float targets per example, example after example (no labels).
  std::vector<float> targets;
  uint32_t target_width = 0;
  std::optional<TableSchema> table;  // CSV: the columns' types, categories and profile

  uint64_t size() const { return target_width > 0 ? targets.size() / target_width : labels.size(); }
  uint64_t example_values() const;  // product of `shape`
  static uint32_t dtype_size(Dtype dtype) { return pstrain::dtype_size(dtype); }
};

// What is wrong with an uploaded dataset. kind() is stable (a REST layer may map it to a problem
// type); line() and column() locate a CSV defect (line 1 is the header; 0 and "" when they do not
// apply). what() is the full human-readable message, including line and column.
class DatasetFormatError : public DataError {
 public:
  enum class Kind {
    kUnreadable,         // the file cannot be opened or read, or is not a zip archive
    kEmpty,              // no header, or a header and no data rows
    kBadHeader,          // empty column name, or no feature column
    kDuplicateColumn,    // two columns share a name
    kMissingLabelColumn, // the label column is not in the header
    kQuotedField,        // a malformed quoted field (text after the closing quote, or never closed)
    kRaggedRow,          // a row's field count differs from the header's
    kNotNumeric,         // a cell does not fit the type its column was given (types=...)
    kNonFinite,          // a feature is NaN, infinite, or beyond float32's range
    kBadLabel,           // a label is missing, not a class (another split's names) or not a number where one is needed
    kTooFewClasses,      // every label is 0: fewer than 2 classes
    kTooLarge,           // a size cap is exceeded (rows, columns, line length, bytes, dims)
    kBadNpyHeader,       // an .npy magic, version or header dict is malformed
    kFortranOrder,       // an .npy array is stored column-major
    kBadDtype,           // an array's dtype is not one accepted for its role
    kBadRank,            // an array's rank is not one accepted for its role
    kMissingArray,       // an .npz archive has no x.npy or no y.npy
    kLengthMismatch,     // x and y hold different numbers of examples
    kTruncated,          // an array's data is shorter than its shape says
    kTrailingData,       // an array's data is longer than its shape says
    kBadEncoding,        // text (a CSV's, a text file's) is not UTF-8
    kBadRecord,          // a JSON Lines line is not a JSON object of plain values
    kBadImage,           // a class folder's file is not a PNG or JPEG, does not decode, or is of another size
    kBadFolders,         // an archive's class folders: an empty one, a link, a path with "..", an unknown class
  };

  DatasetFormatError(Kind kind, const std::string& message, uint64_t line = 0, std::string column = "")
      : DataError(message), kind_(kind), line_(line), column_(std::move(column)) {}
  Kind kind() const { return kind_; }
  uint64_t line() const { return line_; }
  const std::string& column() const { return column_; }

 private:
  Kind kind_;
  uint64_t line_;
  std::string column_;
};

// The kind's stable name ("ragged_row", "not_numeric", ...), for logs and problem types.
std::string_view format_error_kind_name(DatasetFormatError::Kind kind);

// What a stream_* function found: the examples' shape and dtype, their count, and the classes.
struct ExampleSummary {
  std::vector<uint32_t> shape;  // per example: {d} or {h, w, c}
  ParsedExamples::Dtype dtype = ParsedExamples::Dtype::kFloat32;
  uint64_t examples = 0;
  uint32_t classes = 0;               // max label + 1, at least 2; 0 for regression
  std::vector<uint64_t> class_counts;  // examples per label, `classes` entries
  uint32_t target_width = 0;           // regression: float targets per example (0: class labels)
  std::optional<TableSchema> table;    // CSV: the columns' types, categories and profile
  std::optional<TextProfile> text;     // text documents (shape {}): their profile
};

// Where the streaming parsers put what they read, in bounded pieces, so that a file of any size
// is checked and converted without being held in memory. Calls: begin() once (before any
// examples), then examples() with whole or partial examples' bytes in order, and labels() in
// order (the parsers may give every label before or after the examples). A sink may throw to
// stop the parse (e.g. a full disk); the exception propagates.
class ExampleSink {
 public:
  virtual ~ExampleSink() = default;
  virtual void begin(const std::vector<uint32_t>& shape, ParsedExamples::Dtype dtype) = 0;
  virtual void examples(const uint8_t* bytes, size_t n) = 0;
  virtual void labels(const int32_t* labels, size_t n) = 0;
  // Regression: `n` float target values (ExampleSummary::target_width per example), in order,
  // instead of labels. A sink that keeps only labels refuses them.
  virtual void targets(const float* values, size_t n);
};

// Caps shared by both formats. Defaults in comments.
struct ExampleLimits {
  uint64_t max_examples = 10'000'000;         // rows of a CSV, length of x and y
  uint64_t max_bytes = uint64_t{2} << 30;     // size of ParsedExamples::bytes (2 GiB)
  uint32_t max_classes = kMaxClasses;         // labels must be below this (10,000; and below 2^31)
  // float32 examples may hold NaN: a stored table's missing values (table_schema.h). Infinities
  // are refused all the same.
  bool allow_nan = false;
};

// The cells read as missing unless the upload names others (?missing=).
std::vector<std::string> default_missing_values();

// Where a table's text columns' cells go (table_schema.h: they are not stored as values): each
// row's cell of text column k (k counts the schema's text columns in order), in row order, a
// missing cell as "". The parsers have checked the text is UTF-8.
class TextCellSink {
 public:
  virtual ~TextCellSink() = default;
  virtual void cell(size_t text_column, std::string_view text) = 0;
};

struct CsvOptions {
  std::string label_column = "label";  // name of the label column in the header
  // The label column: false (the default) reads whole numbers as class labels, makes the dataset
  // a regression one (float targets) when any value has a fraction, and reads any other text as
  // class names; true always reads float targets (integer-valued regression, such as counts).
  bool regression = false;
  char separator = 0;  // ',', ';' or '\t'; 0: detected from the header line (detect_csv_separator)
  // Column types that override inference, by column name (every name must be a column).
  std::map<std::string, ColumnType> types;
  std::vector<std::string> missing_values = default_missing_values();
  // Classes fixed by the dataset's other split: string labels must be among these names (their
  // index is the class). Empty: derived from this file.
  std::vector<std::string> class_names;
  // The feature columns fixed by the dataset's other split, in order, with their types: the
  // header must have exactly these (besides the label) and `types` may not contradict them.
  std::vector<std::pair<std::string, ColumnType>> expected_columns;
  // Text columns' cells (null: profiled, then dropped, as loading for training does).
  TextCellSink* text_cells = nullptr;
  uint32_t max_columns = 100'000;        // header fields, label included
  uint64_t max_line_bytes = 16 << 20;    // one record, terminators excluded (16 MiB)
  ExampleLimits limits;
};

// Opens the input again from its start (the table parser reads it twice: types, then values).
using StreamOpener = std::function<std::unique_ptr<std::istream>()>;
// Opens the file at `path` (binary); an unopenable file is a kUnreadable error naming it.
StreamOpener file_opener(const std::string& path);

// Parses a CSV table (csv_records.h: RFC 4180 with the separator detected or given, BOM, CRLF).
// `source` names the input in messages ("upload.csv").
//
// The first record is a header of column names (non-empty, distinct, the label column among
// them). Every further record is one example with exactly as many fields. Each feature column's
// type is inferred from the whole file unless options.types names it (table_schema.h): numeric
// when every present cell is a decimal number (as strtod reads them, optional leading '+'),
// boolean when every present cell is true/false/yes/no (any case), text when most present cells
// (more than half) are distinct and of three words or more, or there are more distinct values
// than kMaxCategories (free text, ids; at most kMaxTextColumns text columns), else categorical
// (its sorted distinct values). Cells in options.missing_values are missing (NaN in
// the stored form), in every column but the label's. Numbers beyond float32's range (or spelled
// inf) are kNonFinite errors. The result has shape {stored columns}, dtype kFloat32, the values
// of table_schema.h in header order without the label and ignored columns; summary.table holds
// the schema and the profile.
//
// Labels: as CsvOptions::regression says; class numbers must be below limits.max_classes
// (classes = max label + 1, at least 2; a small upload may lack a rare class); class names are
// sorted byte-wise (at least 2, unless options.class_names fixes them).
ExampleSummary stream_csv(const StreamOpener& open, const std::string& source, const CsvOptions& options,
                          ExampleSink& sink);
// The same, from a stream (read whole into memory first), into memory.
ParsedExamples parse_csv(std::istream& in, const std::string& source, const CsvOptions& options = {});

// JSON Lines (application/x-ndjson): one JSON object per line, blank lines skipped. The columns
// are the keys in the order first seen (a key a line lacks is a missing value there); numbers are
// their decimal text, strings their text, booleans true/false, null missing, so every rule of
// stream_csv applies from there (types, missing values, labels, caps; options.separator is
// unused). A line that is not an object, or a value that is an array or object, is kBadRecord
// naming the line (and the field).
ExampleSummary stream_jsonl(const StreamOpener& open, const std::string& source, const CsvOptions& options,
                            ExampleSink& sink);
ParsedExamples parse_jsonl(std::istream& in, const std::string& source, const CsvOptions& options = {});

// One array of an .npy file.
struct NpyArray {
  enum class Dtype { kUint8, kInt32, kInt64, kFloat32 };  // '|u1', '<i4', '<i8', '<f4'
  Dtype dtype = Dtype::kUint8;
  std::vector<uint64_t> shape;  // () is a scalar
  std::vector<uint8_t> bytes;   // product(shape) values, C order, little-endian
};

// Reads one .npy array (format versions 1.0, 2.0 and 3.0) from `in`, which must end where the
// array's data does (trailing bytes are kTrailingData). Accepts dtypes '|u1' (also '<u1', '>u1'),
// '<i4', '<i8', '<f4'; rejects fortran_order True. Caps: limits.max_bytes for the data, 64 KiB
// for the header.
NpyArray read_npy(std::istream& in, const std::string& source, const ExampleLimits& limits = {});

// Reads an .npz archive (numpy.savez or savez_compressed) holding `x.npy` and `y.npy`:
//   x: '|u1' or '<f4', shape (n, d), (n, h, w) read as (n, h, w, 1), or (n, h, w, c);
//   y: '|u1', '<i4' or '<i8', shape (n,), each a non-negative integer (classes as for parse_csv).
// Other entries are ignored. Float x must be finite. The result's dtype follows x.
ParsedExamples read_npz(const std::string& path, const ExampleLimits& limits = {});
// The same, streamed: y's header first (its length checks x's), then x in pieces of 1 MiB, then
// y's values in pieces of 65,536 (nothing is held per example: a bad label is found after x).
ExampleSummary stream_npz(const std::string& path, const ExampleLimits& limits, ExampleSink& sink);
// The same rules for a pair of .npy files (what the dataset catalog stores, or a directory holds).
ExampleSummary stream_npy_pair(const std::string& x_path, const std::string& y_path, const ExampleLimits& limits,
                               ExampleSink& sink);

// An MNIST-style IDX pair, each gzip'd or plain: images (n, h, w) of unsigned bytes, read as
// uint8 examples of shape {h, w, 1}, and labels (n) of unsigned bytes. Defects are
// DatasetFormatErrors as above (a bad magic is kBadNpyHeader, a count mismatch kLengthMismatch).
ExampleSummary stream_idx(const std::string& images_path, const std::string& labels_path, const ExampleLimits& limits,
                          ExampleSink& sink);

// A sink writing the form the dataset catalog stores: `x_path` an .npy of the examples
// ((n, ...shape), |u1 or <f4) and `y_path` an .npy of int32 labels ((n,)). The examples go to disk
// as they come; the labels are kept (4 bytes each) and written by finish(). Throws pstrain::Error
// for an I/O failure. The files are complete only after finish().
class NpyFileWriter final : public ExampleSink {
 public:
  NpyFileWriter(std::string x_path, std::string y_path);
  void begin(const std::vector<uint32_t>& shape, ParsedExamples::Dtype dtype) override;
  void examples(const uint8_t* bytes, size_t n) override;
  void labels(const int32_t* labels, size_t n) override;
  void targets(const float* values, size_t n) override;
  void finish();

 private:
  std::string x_path_, y_path_;
  std::ofstream x_;
  std::vector<uint32_t> shape_;
  ParsedExamples::Dtype dtype_ = ParsedExamples::Dtype::kFloat32;
  std::vector<int32_t> labels_;
  std::vector<float> targets_;
};

}  // namespace pstrain
