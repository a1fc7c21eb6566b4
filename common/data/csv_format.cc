// CSV tables (dataset_formats.h stream_csv): RFC 4180 records (csv_records.h) through the table
// reader (table_reader.h).
#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "common/data/csv_records.h"
#include "common/data/dataset_formats.h"
#include "common/data/format_parts.h"
#include "common/data/table_reader.h"

namespace pstrain {

using namespace format_detail;

StreamOpener file_opener(const std::string& path) {
  return [path]() -> std::unique_ptr<std::istream> {
    auto in = std::make_unique<std::ifstream>(path, std::ios::binary);
    if (!*in) fail(Kind::kUnreadable, path + ": cannot open: " + std::strerror(errno));
    return in;
  };
}

std::vector<std::string> default_missing_values() { return {"", "NA", "N/A", "NaN", "nan", "null", "NULL", "?"}; }

namespace {

class CsvSource final : public Records {
 public:
  CsvSource(std::unique_ptr<std::istream> in, const std::string& source, char separator, uint64_t max_bytes)
      : in_(std::move(in)), records_(*in_, source, separator, max_bytes) {}
  bool next(std::vector<std::string_view>& fields) override { return records_.next(fields); }
  uint64_t line() const override { return records_.line(); }

 private:
  std::unique_ptr<std::istream> in_;
  CsvRecords records_;
};

}  // namespace

ExampleSummary stream_csv(const StreamOpener& open, const std::string& source, const CsvOptions& options, ExampleSink& sink) {
  char separator = options.separator;
  if (separator == 0) {
    auto in = open_checked(open, source);
    // Past a byte order mark and blank lines before the header.
    while (in->peek() == '\n' || in->peek() == '\r' || in->peek() == 0xEF || in->peek() == 0xBB || in->peek() == 0xBF) in->get();
    separator = detect_csv_separator(*in, options.max_line_bytes);
  }
  return stream_table(
      [&]() -> std::unique_ptr<Records> {
        return std::make_unique<CsvSource>(open_checked(open, source), source, separator, options.max_line_bytes);
      },
      source, options, sink, separator);
}

ParsedExamples parse_csv(std::istream& in, const std::string& source, const CsvOptions& options) {
  return parse_in_memory(in, source, options, &stream_csv);
}

}  // namespace pstrain
