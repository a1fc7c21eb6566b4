#include "common/data/dataset_formats.h"

#include <algorithm>
#include <bit>
#include <charconv>
#include <cmath>
#include <exception>
#include <cerrno>
#include <cstring>
#include <limits>
#include <unordered_map>

#include "common/data/format_parts.h"

namespace pstrain {

void ExampleSink::targets(const float*, size_t) {
  throw DatasetFormatError(DatasetFormatError::Kind::kBadDtype,
                           "float targets (a regression dataset) cannot be used here: it takes class labels only");
}

static_assert(std::endian::native == std::endian::little,
              "ParsedExamples and .npy data are little-endian; a big-endian host needs byte swaps");

using namespace format_detail;

namespace {

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

// A cell as shown in a message: quoted, cut to a readable length.
std::string shown(std::string_view cell) {
  constexpr size_t kMax = 40;
  std::string out(1, '\'');
  out.append(cell.substr(0, kMax));
  if (cell.size() > kMax) out.append("...");
  out.push_back('\'');
  return out;
}

// Reads one line into `line` without its terminator ("\n" or "\r\n"). Returns false at the end
// of input with nothing read. A line longer than `max_bytes` is an error, detected before more
// than max_bytes + 1 characters are buffered.
bool read_line(std::istream& in, std::string& line, uint64_t max_bytes, const std::string& source,
               uint64_t line_number) {
  line.clear();
  std::streambuf* buf = in.rdbuf();
  bool any = false;
  for (;;) {
    int c = buf->sbumpc();
    if (c == std::char_traits<char>::eof()) {
      in.setstate(std::ios::eofbit);
      break;
    }
    any = true;
    if (c == '\n') break;
    line.push_back(static_cast<char>(c));
    if (line.size() > max_bytes + 1) {  // +1: room for the '\r' of a "\r\n" ending
      fail(Kind::kTooLarge,
           source + ": line " + std::to_string(line_number) + " is longer than the cap of " +
               std::to_string(max_bytes) + " bytes",
           line_number);
    }
  }
  if (!line.empty() && line.back() == '\r') line.pop_back();
  if (line.size() > max_bytes) {
    fail(Kind::kTooLarge,
         source + ": line " + std::to_string(line_number) + " is longer than the cap of " +
             std::to_string(max_bytes) + " bytes",
         line_number);
  }
  return any;
}

// Splits `line` at commas into `fields` (views into `line`), trimmed.
void split_fields(std::string_view line, std::vector<std::string_view>& fields) {
  fields.clear();
  size_t start = 0;
  for (;;) {
    size_t comma = line.find(',', start);
    if (comma == std::string_view::npos) {
      fields.push_back(trim(line.substr(start)));
      return;
    }
    fields.push_back(trim(line.substr(start, comma - start)));
    start = comma + 1;
  }
}

std::string where(const std::string& source, uint64_t line, const std::string& column, size_t index) {
  return source + ": line " + std::to_string(line) + ", column '" + column + "' (" +
         std::to_string(index + 1) + ")";
}

}  // namespace

uint64_t ParsedExamples::example_values() const {
  uint64_t n = 1;
  for (uint32_t d : shape) n *= d;
  return n;
}

std::string_view format_error_kind_name(DatasetFormatError::Kind kind) {
  switch (kind) {
    case Kind::kUnreadable: return "unreadable";
    case Kind::kEmpty: return "empty";
    case Kind::kBadHeader: return "bad_header";
    case Kind::kDuplicateColumn: return "duplicate_column";
    case Kind::kMissingLabelColumn: return "missing_label_column";
    case Kind::kQuotedField: return "quoted_field";
    case Kind::kRaggedRow: return "ragged_row";
    case Kind::kNotNumeric: return "not_numeric";
    case Kind::kNonFinite: return "non_finite";
    case Kind::kBadLabel: return "bad_label";
    case Kind::kTooFewClasses: return "too_few_classes";
    case Kind::kTooLarge: return "too_large";
    case Kind::kBadNpyHeader: return "bad_npy_header";
    case Kind::kFortranOrder: return "fortran_order";
    case Kind::kBadDtype: return "bad_dtype";
    case Kind::kBadRank: return "bad_rank";
    case Kind::kMissingArray: return "missing_array";
    case Kind::kLengthMismatch: return "length_mismatch";
    case Kind::kTruncated: return "truncated";
    case Kind::kTrailingData: return "trailing_data";
  }
  return "unknown";
}

// ---------------------------------------------------------------------------------------------
// CSV

ExampleSummary stream_csv(std::istream& in, const std::string& source, const CsvOptions& options, ExampleSink& sink) {
  const ExampleLimits& limits = options.limits;
  std::string line;
  std::vector<std::string_view> fields;
  uint64_t line_number = 0;

  // Header: the first non-blank line.
  bool have_header = false;
  while (read_line(in, line, options.max_line_bytes, source, line_number + 1)) {
    ++line_number;
    if (!trim(line).empty()) {
      have_header = true;
      break;
    }
  }
  if (!have_header) fail(Kind::kEmpty, source + ": the file is empty (no header row)");
  // Spreadsheets often save UTF-8 with a byte order mark; it is not part of the first name.
  if (line.starts_with("\xEF\xBB\xBF")) line.erase(0, 3);
  if (line.find('"') != std::string::npos) {
    fail(Kind::kQuotedField,
         source + ": line " + std::to_string(line_number) +
             ": quoted fields are not supported; write column names and values without '\"'",
         line_number);
  }
  split_fields(line, fields);
  if (fields.size() > options.max_columns) {
    fail(Kind::kTooLarge,
         source + ": the header has " + std::to_string(fields.size()) + " columns, more than the cap of " +
             std::to_string(options.max_columns),
         line_number);
  }
  std::vector<std::string> names;
  names.reserve(fields.size());
  std::unordered_map<std::string_view, size_t> seen;  // name -> index
  size_t label_index = fields.size();
  for (size_t i = 0; i < fields.size(); ++i) {
    if (fields[i].empty()) {
      fail(Kind::kBadHeader,
           source + ": line " + std::to_string(line_number) + ": column " + std::to_string(i + 1) +
               " has an empty name",
           line_number);
    }
    auto [it, added] = seen.emplace(fields[i], i);
    if (!added) {
      fail(Kind::kDuplicateColumn,
           source + ": line " + std::to_string(line_number) + ": columns " + std::to_string(it->second + 1) +
               " and " + std::to_string(i + 1) + " are both named '" + std::string(fields[i]) + "'",
           line_number, std::string(fields[i]));
    }
    if (fields[i] == options.label_column) label_index = i;
    names.emplace_back(fields[i]);
  }
  if (label_index == fields.size()) {
    fail(Kind::kMissingLabelColumn,
         source + ": the header has no label column '" + options.label_column + "'", line_number);
  }
  if (names.size() < 2) {
    fail(Kind::kBadHeader, source + ": the header has no feature column besides '" + options.label_column + "'",
         line_number);
  }
  const size_t columns = names.size();
  const uint64_t features = columns - 1;
  const uint64_t row_bytes = features * sizeof(float);

  ExampleSummary out;
  out.shape = {static_cast<uint32_t>(features)};
  out.dtype = ParsedExamples::Dtype::kFloat32;
  sink.begin(out.shape, out.dtype);
  std::vector<float> row(features);
  ClassCounter classes(source);
  std::vector<double> label_values;  // the label column, decided at the end (classes or targets)
  bool fractional = false;           // a label value that is not a whole number: regression
  std::exception_ptr bad_label;      // the first whole-number label that is not a class

  while (read_line(in, line, options.max_line_bytes, source, line_number + 1)) {
    ++line_number;
    if (trim(line).empty()) continue;
    if (out.examples >= limits.max_examples) {
      fail(Kind::kTooLarge,
           source + ": line " + std::to_string(line_number) + ": more than the cap of " +
               std::to_string(limits.max_examples) + " rows",
           line_number);
    }
    if ((out.examples + 1) * row_bytes > limits.max_bytes) {
      fail(Kind::kTooLarge,
           source + ": line " + std::to_string(line_number) + ": the features exceed the cap of " +
               std::to_string(limits.max_bytes) + " bytes",
           line_number);
    }
    split_fields(line, fields);
    if (fields.size() != columns) {
      fail(Kind::kRaggedRow,
           source + ": line " + std::to_string(line_number) + " has " + std::to_string(fields.size()) +
               " fields, the header has " + std::to_string(columns),
           line_number);
    }
    size_t f = 0;
    for (size_t i = 0; i < columns; ++i) {
      std::string_view cell = fields[i];
      if (cell.find('"') != std::string_view::npos) {
        fail(Kind::kQuotedField,
             where(source, line_number, names[i], i) + ": quoted fields are not supported: " + shown(cell),
             line_number, names[i]);
      }
      if (i == label_index) {
        std::string_view number = cell;
        if (!number.empty() && number.front() == '+') number.remove_prefix(1);
        double value = 0;
        auto [end, ec] = std::from_chars(number.data(), number.data() + number.size(), value);
        if (number.empty() || ec != std::errc() || end != number.data() + number.size() ||
            !std::isfinite(static_cast<float>(value))) {
          fail(Kind::kBadLabel,
               where(source, line_number, names[i], i) + ": label " + shown(cell) +
                   (options.regression ? " is not a finite number" : " is not a non-negative integer or a number"),
               line_number, names[i]);
        }
        if (value != std::floor(value) || std::abs(value) >= 1e15) {
          fractional = true;
        } else if (!options.regression && !bad_label) {
          // Checked as a class label at the end, unless a fraction elsewhere makes the column targets.
          try {
            check_label(static_cast<int64_t>(value), limits, where(source, line_number, names[i], i), line_number,
                        names[i]);
          } catch (const DatasetFormatError&) {
            bad_label = std::current_exception();
          }
        }
        label_values.push_back(value);
        continue;
      }
      std::string_view number = cell;
      if (!number.empty() && number.front() == '+') number.remove_prefix(1);
      double value = 0;
      auto [end, ec] = std::from_chars(number.data(), number.data() + number.size(), value);
      if (number.empty() || end != number.data() + number.size() ||
          (ec != std::errc() && ec != std::errc::result_out_of_range)) {
        fail(Kind::kNotNumeric,
             where(source, line_number, names[i], i) + ": " +
                 (cell.empty() ? std::string("empty cell") : shown(cell) + " is not a number"),
             line_number, names[i]);
      }
      // Parsed as double so that tiny values round to float's zero or subnormals rather than
      // failing; what float cannot hold (or NaN/inf spelled out) is rejected.
      float narrowed = static_cast<float>(value);
      if (ec == std::errc::result_out_of_range || !std::isfinite(narrowed)) {
        fail(Kind::kNonFinite,
             where(source, line_number, names[i], i) + ": " + shown(cell) + " is not a finite float32",
             line_number, names[i]);
      }
      row[f++] = narrowed;
    }
    sink.examples(reinterpret_cast<const uint8_t*>(row.data()), row_bytes);
    ++out.examples;
  }
  if (in.bad()) fail(Kind::kUnreadable, source + ": read error after line " + std::to_string(line_number));
  if (out.examples == 0) fail(Kind::kEmpty, source + ": the file has a header and no data rows", line_number);
  // The label column holds classes when every value is a whole number (checked above), else
  // (or when asked) regression targets.
  if (options.regression || fractional) {
    std::vector<float> targets(label_values.begin(), label_values.end());
    sink.targets(targets.data(), targets.size());
    out.target_width = 1;
    return out;
  }
  if (bad_label) std::rethrow_exception(bad_label);
  std::vector<int32_t> labels(label_values.begin(), label_values.end());
  for (int32_t l : labels) classes.add(l);
  sink.labels(labels.data(), labels.size());
  classes.finish(out);
  return out;
}

ParsedExamples parse_csv(std::istream& in, const std::string& source, const CsvOptions& options) {
  MemorySink sink;
  return sink.take(stream_csv(in, source, options, sink));
}

}  // namespace pstrain
