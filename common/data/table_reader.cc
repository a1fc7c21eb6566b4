// The table reader (table_reader.h): column types inferred from a first pass, then values and
// profile (dataset_formats.h stream_csv has the rules).
#include "common/data/table_reader.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <unordered_map>
#include <unordered_set>
#include <tuple>

#include "common/data/format_parts.h"
#include "common/data/id_hash.h"

namespace pstrain::format_detail {

namespace {

// A cell as shown in a message: quoted, cut to a readable length.
std::string shown(std::string_view cell) {
  constexpr size_t kMax = 40;
  std::string out(1, '\'');
  out.append(cell.substr(0, kMax));
  if (cell.size() > kMax) out.append("...");
  out.push_back('\'');
  return out;
}

std::string where(const std::string& source, uint64_t line, const std::string& column, size_t index) {
  return source + ": line " + std::to_string(line) + ", column '" + column + "' (" + std::to_string(index + 1) + ")";
}

// A decimal number (optional leading '+'); out_of_range: beyond double's range.
bool parse_number(std::string_view cell, double& value, bool& out_of_range) {
  if (!cell.empty() && cell.front() == '+') cell.remove_prefix(1);
  if (cell.empty()) return false;
  auto [end, ec] = std::from_chars(cell.data(), cell.data() + cell.size(), value);
  if (end != cell.data() + cell.size()) return false;
  if (ec == std::errc::result_out_of_range) {
    out_of_range = true;
    return true;
  }
  out_of_range = false;
  return ec == std::errc();
}

// 1 (true, yes), 0 (false, no), -1 (neither), any case.
int parse_boolean(std::string_view cell) {
  if (cell.size() > 5) return -1;
  std::string lower(cell);
  for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (lower == "true" || lower == "yes") return 1;
  if (lower == "false" || lower == "no") return 0;
  return -1;
}

// Distinct values collected per column: enough for every category (and class) a column may have.
constexpr size_t kDistinctCap = std::max<size_t>(kMaxCategories, kMaxClasses) + 1;

// Hash containers of strings looked up by string_view without building a string per cell.
struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
using StringSet = std::unordered_set<std::string, StringHash, std::equal_to<>>;
template <typename V>
using StringMap = std::unordered_map<std::string, V, StringHash, std::equal_to<>>;

struct Inferred {
  bool numeric = true;
  bool whole = true;  // label: every number is a whole one
  bool boolean = true;
  // The distinct present values, up to the cap + 1, in no order: collected once the column is
  // known not to be numeric (or is told categorical), since a numeric column needs none and
  // collecting them cost most of the parse. `partial`: it stopped being numeric after some present
  // values, which a further pass then collects (Table::recollect).
  StringSet distinct;
  bool collect = false;
  bool partial = false;
  uint64_t present = 0;
  uint64_t wordy = 0;  // present values of three words or more (counted once the column is not numeric)
};

class Table {
 public:
  Table(const std::string& source, const CsvOptions& options) : source_(source), options_(options) {}

  // The header record.
  void header(const std::vector<std::string_view>& fields, uint64_t line) {
    if (fields.size() > options_.max_columns) {
      fail(Kind::kTooLarge,
           source_ + ": the header has " + std::to_string(fields.size()) + " columns, more than the cap of " +
               std::to_string(options_.max_columns),
           line);
    }
    std::unordered_map<std::string_view, size_t> seen;  // views of names_, which does not reallocate
    names_.reserve(fields.size());
    label_ = fields.size();
    for (size_t i = 0; i < fields.size(); ++i) {
      if (fields[i].empty()) {
        fail(Kind::kBadHeader, source_ + ": line " + std::to_string(line) + ": column " + std::to_string(i + 1) + " has an empty name",
             line);
      }
      names_.emplace_back(fields[i]);
      auto [it, added] = seen.emplace(names_.back(), i);
      if (!added) {
        fail(Kind::kDuplicateColumn,
             source_ + ": line " + std::to_string(line) + ": columns " + std::to_string(it->second + 1) + " and " +
                 std::to_string(i + 1) + " are both named '" + names_.back() + "'",
             line, names_.back());
      }
      if (names_.back() == options_.label_column) label_ = i;
    }
    if (label_ == fields.size()) {
      fail(Kind::kMissingLabelColumn, source_ + ": the header has no label column '" + options_.label_column + "'", line);
    }
    if (names_.size() < 2) {
      fail(Kind::kBadHeader, source_ + ": the header has no feature column besides '" + options_.label_column + "'", line);
    }
    if (!options_.expected_columns.empty()) expect_columns(line);
    for (const auto& [name, type] : options_.types) {
      const auto it = std::find(names_.begin(), names_.end(), name);
      if (it == names_.end()) {
        fail(Kind::kBadHeader, source_ + ": a type is given for column '" + name + "', which the header does not have", line, name);
      }
      if (static_cast<size_t>(it - names_.begin()) == label_) {
        fail(Kind::kBadHeader, source_ + ": column '" + name + "' is the label; its type cannot be set", line, name);
      }
    }
    inferred_.resize(names_.size());
    // Columns told categorical collect their values from the first row.
    for (size_t i = 0; i < names_.size(); ++i) {
      const auto given = types_.find(names_[i]);
      const auto told = options_.types.find(names_[i]);
      inferred_[i].collect = (given != types_.end() && given->second == ColumnType::kCategorical) ||
                             (told != options_.types.end() && told->second == ColumnType::kCategorical);
    }
  }

  // The header against the dataset's other split: the same feature columns, in order; their
  // types become the given ones.
  void expect_columns(uint64_t line) {
    std::vector<std::string> features;
    for (size_t i = 0; i < names_.size(); ++i) {
      if (i != label_) features.push_back(names_[i]);
    }
    const auto& expected = options_.expected_columns;
    for (size_t k = 0; k < std::max(features.size(), expected.size()); ++k) {
      if (k < features.size() && k < expected.size() && features[k] == expected[k].first) continue;
      const std::string theirs = k < expected.size() ? "'" + expected[k].first + "'" : "no column";
      const std::string mine = k < features.size() ? "'" + features[k] + "'" : "no column";
      fail(Kind::kBadHeader,
           source_ + ": line " + std::to_string(line) + ": feature column " + std::to_string(k + 1) + " is " + mine +
               " but the dataset's other split has " + theirs + " there (a dataset's splits have the same columns)",
           line, k < features.size() ? features[k] : expected[k].first);
    }
    for (const auto& [name, type] : expected) {
      const auto given = options_.types.find(name);
      if (given != options_.types.end() && given->second != type) {
        fail(Kind::kBadHeader,
             source_ + ": column '" + name + "' is " + column_type_name(type) + " in the dataset's other split, not " +
                 column_type_name(given->second),
             line, name);
      }
      types_.emplace(name, type);
    }
  }

  bool missing(std::string_view cell) const {
    return std::find(options_.missing_values.begin(), options_.missing_values.end(), cell) != options_.missing_values.end();
  }

  void check_row(size_t fields, uint64_t line, uint64_t rows) const {
    if (fields != names_.size()) {
      fail(Kind::kRaggedRow,
           source_ + ": line " + std::to_string(line) + " has " + std::to_string(fields) + " fields, the header has " +
               std::to_string(names_.size()),
           line);
    }
    if (rows >= options_.limits.max_examples) {
      fail(Kind::kTooLarge,
           source_ + ": line " + std::to_string(line) + ": more than the cap of " + std::to_string(options_.limits.max_examples) + " rows",
           line);
    }
  }

  // First pass: what every cell could be.
  void observe(const std::vector<std::string_view>& fields, uint64_t line, uint64_t rows) {
    check_row(fields.size(), line, rows);
    for (size_t i = 0; i < fields.size(); ++i) {
      const std::string_view cell = fields[i];
      Inferred& in = inferred_[i];
      if (i == label_) {
        if (missing(cell) && options_.class_names.empty()) {
          fail(Kind::kBadLabel, where(source_, line, names_[i], i) + ": the label is missing (" + shown(cell) + ")", line, names_[i]);
        }
      } else if (missing(cell)) {
        continue;
      }
      double value = 0;
      bool range = false;
      if (in.numeric && !parse_number(cell, value, range)) {
        in.numeric = false;
        in.partial = in.present > 0 && !in.collect;
        in.collect = true;
      }
      // (A whole number beyond 1e15 is no class number: the column is targets.)
      if (in.numeric && (range || value != std::floor(value) || std::abs(value) >= 1e15)) in.whole = false;
      if (in.boolean && parse_boolean(cell) < 0) in.boolean = false;
      ++in.present;
      if (!in.numeric && std::count(cell.begin(), cell.end(), ' ') >= 2) ++in.wordy;
      if (in.collect && in.distinct.size() <= kDistinctCap && in.distinct.find(cell) == in.distinct.end()) in.distinct.emplace(cell);
    }
  }

  // After the first pass: whether a column's values must be collected again from the start.
  bool needs_recollect() const {
    return std::any_of(inferred_.begin(), inferred_.end(), [](const Inferred& in) { return in.partial; });
  }
  // The extra pass (header skipped): the distinct values of the columns that became text late.
  void recollect(const std::vector<std::string_view>& fields) {
    for (size_t i = 0; i < fields.size() && i < inferred_.size(); ++i) {
      Inferred& in = inferred_[i];
      if (!in.partial || (i != label_ && missing(fields[i]))) continue;
      if (in.distinct.size() <= kDistinctCap && in.distinct.find(fields[i]) == in.distinct.end()) in.distinct.emplace(fields[i]);
    }
  }

  // Between the passes: every column's type and categories, the label's kind.
  void decide(uint64_t header_line) {
    for (size_t i = 0; i < names_.size(); ++i) {
      if (i == label_) continue;
      TableColumn c;
      c.name = names_[i];
      std::optional<ColumnType> given;
      if (const auto it = types_.find(names_[i]); it != types_.end()) given = it->second;
      else if (const auto it2 = options_.types.find(names_[i]); it2 != options_.types.end()) given = it2->second;
      Inferred& in = inferred_[i];
      if (given) {
        c.type = *given;
      } else if (in.numeric) {
        c.type = ColumnType::kNumeric;
      } else if (in.boolean) {
        c.type = ColumnType::kBoolean;
      } else if (in.wordy * 2 > in.present && (in.distinct.size() > kMaxCategories || in.distinct.size() * 2 > in.present)) {
        c.type = ColumnType::kText;  // free text: words, most values distinct or too many for categories
      } else if (in.distinct.size() > kMaxCategories) {
        c.type = ColumnType::kId;  // more values than categories hold: users, items, sessions
      } else {
        c.type = ColumnType::kCategorical;
      }
      if (c.type == ColumnType::kText) {
        if (text_profilers_.size() == kMaxTextColumns) {
          fail(Kind::kTooLarge,
               source_ + ": column '" + c.name + "' would be text column " + std::to_string(kMaxTextColumns + 1) + ", over the cap of " +
                   std::to_string(kMaxTextColumns) + " (give the others type ignore: ?types=" + c.name + ":ignore)",
               header_line, c.name);
        }
        text_of_.emplace(columns_.size(), text_profilers_.size());
        text_profilers_.emplace_back();
      }
      if (c.type == ColumnType::kCategorical) {
        if (in.distinct.size() > kMaxCategories) {
          fail(Kind::kTooLarge,
               source_ + ": column '" + c.name + "' has more than " + std::to_string(kMaxCategories) +
                   " distinct values: an id or free text cannot be a category (give it type id, text or ignore: ?types=" +
                   c.name + ":id)",
               header_line, c.name);
        }
        c.categories.assign(in.distinct.begin(), in.distinct.end());
        std::sort(c.categories.begin(), c.categories.end());
      }
      columns_.push_back(std::move(c));
      column_of_.push_back(columns_.size() - 1);
    }
    if (label_ < column_of_.size()) column_of_.insert(column_of_.begin() + static_cast<long>(label_), SIZE_MAX);
    else column_of_.push_back(SIZE_MAX);
    const Inferred& label = inferred_[label_];
    if (!options_.class_names.empty()) {
      label_kind_ = LabelKind::kNames;
      class_names_ = options_.class_names;
    } else if (options_.regression || (label.numeric && !label.whole)) {
      label_kind_ = LabelKind::kTargets;
    } else if (label.numeric) {
      label_kind_ = LabelKind::kNumbers;
    } else {
      label_kind_ = LabelKind::kNames;
      if (label.distinct.size() > options_.limits.max_classes) {
        fail(Kind::kTooLarge,
             source_ + ": the label column '" + names_[label_] + "' has more than " + std::to_string(options_.limits.max_classes) +
                 " distinct values (the class cap)",
             header_line, names_[label_]);
      }
      class_names_.assign(label.distinct.begin(), label.distinct.end());
      std::sort(class_names_.begin(), class_names_.end());
      if (class_names_.size() < 2) {
        fail(Kind::kTooFewClasses, source_ + ": every label is " + shown(class_names_.empty() ? "" : class_names_[0]) +
                                       "; a dataset needs at least 2 classes");
      }
    }
    for (size_t k = 0; k < class_names_.size(); ++k) class_index_.emplace(class_names_[k], static_cast<int32_t>(k));
    for (TableColumn& c : columns_) {
      StringMap<uint32_t> codes;
      for (size_t k = 0; k < c.categories.size(); ++k) codes.emplace(c.categories[k], static_cast<uint32_t>(k));
      codes_.push_back(std::move(codes));
    }
    stored_ = 0;
    for (const TableColumn& c : columns_) stored_ += stored_values(c.type);
    if (stored_ == 0 && text_profilers_.empty()) fail(Kind::kBadHeader, source_ + ": every feature column is ignored", header_line);
    inferred_.clear();
  }

  // Second pass: one row's stored values into `row`, its label kept.
  void read(const std::vector<std::string_view>& fields, uint64_t line, std::vector<float>& row) {
    size_t f = 0;
    for (size_t i = 0; i < fields.size(); ++i) {
      const std::string_view cell = fields[i];
      if (i == label_) {
        label(cell, line, i);
        continue;
      }
      const size_t ci = column_of_[i];
      TableColumn& c = columns_[ci];
      if (c.type == ColumnType::kIgnored) continue;
      if (c.type == ColumnType::kText) {
        text_cell(ci, missing(cell) ? std::optional<std::string_view>() : cell);
        continue;
      }
      float& out = row[f++];
      if (missing(cell)) {
        out = std::nanf("");
        if (c.type == ColumnType::kId) row[f++] = std::nanf("");
        continue;
      }
      switch (c.type) {
        case ColumnType::kNumeric: {
          double value = 0;
          bool range = false;
          if (!parse_number(cell, value, range)) {
            fail(Kind::kNotNumeric, where(source_, line, c.name, i) + ": " + shown(cell) + " is not a number (the column is numeric)",
                 line, c.name);
          }
          const float narrowed = static_cast<float>(value);
          if (range || !std::isfinite(narrowed)) {
            fail(Kind::kNonFinite, where(source_, line, c.name, i) + ": " + shown(cell) + " is not a finite float32", line, c.name);
          }
          out = narrowed;
          break;
        }
        case ColumnType::kBoolean: {
          const int b = parse_boolean(cell);
          if (b < 0) {
            fail(Kind::kNotNumeric,
                 where(source_, line, c.name, i) + ": " + shown(cell) + " is not a boolean (true, false, yes or no; the column is boolean)",
                 line, c.name);
          }
          out = static_cast<float>(b);
          break;
        }
        case ColumnType::kCategorical: {
          const auto it = codes_[ci].find(cell);
          out = static_cast<float>(it->second);
          break;
        }
        case ColumnType::kId: std::tie(out, row[f++]) = fingerprint_to_values(string_fingerprint(cell)); break;
        case ColumnType::kIgnored:
        case ColumnType::kText: break;
      }
    }
    ++rows_;
  }

  // The text columns' profiles, into `schema` (the TableProfiler's result).
  void finish_text(TableSchema& schema) const {
    for (const auto& [ci, k] : text_of_) {
      ColumnProfile& p = schema.columns[ci].profile;
      p = ColumnProfile{};
      p.missing = text_missing_.size() > k ? text_missing_[k] : 0;
      p.text = text_profilers_[k].finish();
    }
  }

  size_t stored() const { return stored_; }
  uint64_t rows() const { return rows_; }
  // The schema (profile still empty) once decide() ran.
  TableSchema schema() const {
    TableSchema t;
    t.label = names_[label_];
    t.class_names = label_kind_ == LabelKind::kNames ? class_names_ : std::vector<std::string>{};
    t.columns = columns_;
    return t;
  }

  enum class LabelKind { kNumbers, kTargets, kNames };
  LabelKind label_kind() const { return label_kind_; }
  // The label of the row read() read last: its value (kNumbers, kTargets) or class (kNames).
  double row_value() const { return row_value_; }
  int32_t row_class() const { return row_class_; }
  const std::vector<std::string>& class_names() const { return class_names_; }

 private:
  void label(std::string_view cell, uint64_t line, size_t i) {
    if (label_kind_ == LabelKind::kNames) {
      const auto it = class_index_.find(cell);
      if (it == class_index_.end()) {
        std::string known;
        for (size_t k = 0; k < class_names_.size() && k < 20; ++k) known += (k ? ", " : "") + class_names_[k];
        fail(Kind::kBadLabel, where(source_, line, names_[i], i) + ": label " + shown(cell) + " is not one of the dataset's classes (" + known +
                                  (class_names_.size() > 20 ? ", ..." : "") + ")",
             line, names_[i]);
      }
      row_class_ = it->second;
      return;
    }
    double value = 0;
    bool range = false;
    if (!parse_number(cell, value, range) || range || !std::isfinite(static_cast<float>(value))) {
      fail(Kind::kBadLabel, where(source_, line, names_[i], i) + ": label " + shown(cell) + " is not a finite number", line, names_[i]);
    }
    if (label_kind_ == LabelKind::kNumbers) check_label(static_cast<int64_t>(value), options_.limits, where(source_, line, names_[i], i), line, names_[i]);
    row_value_ = value;
  }

  void text_cell(size_t ci, std::optional<std::string_view> cell) {
    const size_t k = text_of_.at(ci);
    if (!cell || cell->empty()) {  // (an empty cell is missing text)
      if (text_missing_.size() <= k) text_missing_.resize(k + 1, 0);
      ++text_missing_[k];
    } else {
      text_profilers_[k].add(*cell);
    }
    text_bytes_ += cell ? cell->size() : 0;
    if (text_bytes_ > options_.limits.max_bytes) {
      fail(Kind::kTooLarge, source_ + ": the text columns' cells exceed the cap of " + std::to_string(options_.limits.max_bytes) + " bytes");
    }
    if (options_.text_cells != nullptr) options_.text_cells->cell(k, cell.value_or(std::string_view()));
  }

  const std::string& source_;
  const CsvOptions& options_;
  std::vector<std::string> names_;
  std::map<std::string, ColumnType> types_;  // fixed by the other split (expected_columns)
  size_t label_ = 0;
  std::vector<Inferred> inferred_;
  std::vector<TableColumn> columns_;
  std::vector<size_t> column_of_;  // header index -> index in columns_ (SIZE_MAX: the label)
  std::vector<StringMap<uint32_t>> codes_;
  std::map<size_t, size_t> text_of_;  // text column: index in columns_ -> its index among the text columns
  std::vector<TextProfiler> text_profilers_;
  std::vector<uint64_t> text_missing_;
  uint64_t text_bytes_ = 0;
  size_t stored_ = 0;  // values in a stored row (table_schema.h stored_values)
  uint64_t rows_ = 0;
  LabelKind label_kind_ = LabelKind::kNumbers;
  std::vector<std::string> class_names_;
  StringMap<int32_t> class_index_;
  double row_value_ = 0;   // the last row's label (kNumbers, kTargets)
  int32_t row_class_ = 0;  // (kNames)
};

}  // namespace

std::unique_ptr<std::istream> open_checked(const StreamOpener& open, const std::string& source) {
  std::unique_ptr<std::istream> in = open();
  if (!in || !*in) fail(Kind::kUnreadable, source + ": cannot open");
  return in;
}


// The two passes over a table's records: types, then values and profile.
ExampleSummary stream_table(const RecordsFactory& records_of, const std::string& source, const CsvOptions& options,
                            ExampleSink& sink, char separator) {
  Table table(source, options);
  std::vector<std::string_view> fields;
  uint64_t header_line = 0;
  {
    const auto records = records_of();
    if (!records->next(fields)) fail(Kind::kEmpty, source + ": the file is empty (no header row)");
    header_line = records->line();
    table.header(fields, header_line);
    uint64_t rows = 0;
    while (records->next(fields)) table.observe(fields, records->line(), rows++);
    if (rows == 0) fail(Kind::kEmpty, source + ": the file has a header and no data rows", records->line());
  }
  if (table.needs_recollect()) {
    const auto records = records_of();
    records->next(fields);  // the header
    while (records->next(fields)) table.recollect(fields);
  }
  table.decide(header_line);

  ExampleSummary out;
  out.shape = {static_cast<uint32_t>(table.stored())};
  out.dtype = ParsedExamples::Dtype::kFloat32;
  const uint64_t row_bytes = table.stored() * sizeof(float);
  sink.begin(out.shape, out.dtype);
  std::vector<float> row(table.stored());
  TableProfiler profiler(table.schema());
  const auto records = records_of();
  // Each row's label goes to the sink right after the row (a sink that writes shards seals them
  // as they fill: nothing is kept per row).
  ClassCounter classes(source);
  std::vector<uint64_t> named_counts(table.class_names().size(), 0);
  records->next(fields);  // the header
  while (records->next(fields)) {
    if ((table.rows() + 1) * row_bytes > options.limits.max_bytes) {
      fail(Kind::kTooLarge,
           source + ": line " + std::to_string(records->line()) + ": the features exceed the cap of " +
               std::to_string(options.limits.max_bytes) + " bytes",
           records->line());
    }
    table.read(fields, records->line(), row);
    profiler.add(row.data());
    sink.examples(reinterpret_cast<const uint8_t*>(row.data()), row_bytes);
    switch (table.label_kind()) {
      case Table::LabelKind::kTargets: {
        const float target = static_cast<float>(table.row_value());
        sink.targets(&target, 1);
        break;
      }
      case Table::LabelKind::kNumbers: {
        const auto label = static_cast<int32_t>(table.row_value());
        classes.add(label);
        sink.labels(&label, 1);
        break;
      }
      case Table::LabelKind::kNames: {
        const int32_t label = table.row_class();
        ++named_counts[static_cast<size_t>(label)];
        sink.labels(&label, 1);
        break;
      }
    }
  }
  out.table = profiler.finish();
  table.finish_text(*out.table);
  out.examples = table.rows();
  out.table->separator = separator;
  switch (table.label_kind()) {
    case Table::LabelKind::kTargets: out.target_width = 1; break;
    case Table::LabelKind::kNumbers: classes.finish(out); break;
    case Table::LabelKind::kNames:
      out.classes = static_cast<uint32_t>(table.class_names().size());
      out.class_counts = std::move(named_counts);
      break;
  }
  return out;
}


ParsedExamples parse_in_memory(std::istream& in, const std::string& source, const CsvOptions& options,
                               TableStreamer stream) {
  std::ostringstream text;
  text << in.rdbuf();
  const std::string all = text.str();
  MemorySink sink;
  return sink.take(stream([&] { return std::make_unique<std::istringstream>(all); }, source, options, sink));
}

}  // namespace pstrain::format_detail
