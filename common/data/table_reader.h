// Internal to common/data: the table reader that CSV (csv_format.cc) and JSON Lines
// (jsonl_format.cc) share. A format gives its records as text fields (the header first, then one
// record per row); stream_table makes the two passes of dataset_formats.h stream_csv over them:
// column types, categories and label kind from the whole file, then the stored values and the
// profile.
//
// Thread rules: a Records belongs to one caller; stream_table keeps no state.
#pragma once

#include <functional>
#include <istream>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/data/dataset_formats.h"

namespace pstrain::format_detail {

// A table's records from a fresh stream, for one pass.
class Records {
 public:
  virtual ~Records() = default;
  // The next record's fields (valid until the next call); false at the end.
  virtual bool next(std::vector<std::string_view>& fields) = 0;
  // The line the last record started on (for messages).
  virtual uint64_t line() const = 0;
};
using RecordsFactory = std::function<std::unique_ptr<Records>()>;

// The two passes; `separator` is recorded in the table's schema.
ExampleSummary stream_table(const RecordsFactory& records_of, const std::string& source, const CsvOptions& options,
                            ExampleSink& sink, char separator);

// A whole stream read into memory and parsed by `stream` (stream_csv or stream_jsonl) into memory.
using TableStreamer = ExampleSummary (*)(const StreamOpener&, const std::string&, const CsvOptions&, ExampleSink&);
ParsedExamples parse_in_memory(std::istream& in, const std::string& source, const CsvOptions& options,
                               TableStreamer stream);

// The stream `open` gives, or a kUnreadable error naming `source`.
std::unique_ptr<std::istream> open_checked(const StreamOpener& open, const std::string& source);

}  // namespace pstrain::format_detail
