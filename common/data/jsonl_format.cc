// JSON Lines tables (dataset_formats.h stream_jsonl): each line's object as a record of text
// fields through the table reader (table_reader.h).
#include <boost/json.hpp>

#include <charconv>
#include <sstream>
#include <unordered_set>

#include "common/base/json_parse.h"
#include "common/data/dataset_formats.h"
#include "common/data/format_parts.h"
#include "common/data/table_reader.h"

namespace pstrain {
namespace json = boost::json;

using namespace format_detail;

namespace {

// JSON Lines as records: the header is the keys (collected by a first pass), each line the values
// as text aligned to them ("" for null or absent: missing; a list of ids joined by '|').
class JsonlSource final : public Records {
 public:
  JsonlSource(std::unique_ptr<std::istream> in, const std::string& source, uint64_t max_bytes,
              const std::vector<std::string>* columns)
      : in_(std::move(in)), source_(source), max_bytes_(max_bytes), columns_(columns) {}

  // The keys of every line, in the order first seen (the first pass).
  static std::vector<std::string> keys(std::unique_ptr<std::istream> in, const std::string& source, uint64_t max_bytes) {
    JsonlSource s(std::move(in), source, max_bytes, nullptr);
    std::vector<std::string> keys;
    std::unordered_set<std::string> seen;
    while (s.read_object()) {
      for (const auto& field : s.object_) {
        if (seen.insert(std::string(field.key())).second) keys.emplace_back(field.key());
      }
    }
    if (keys.empty()) fail(Kind::kEmpty, source + ": no JSON object in the file");
    return keys;
  }

  bool next(std::vector<std::string_view>& fields) override {
    fields.clear();
    if (!header_done_) {
      header_done_ = true;
      for (const std::string& c : *columns_) fields.emplace_back(c);
      record_line_ = 0;
      return true;
    }
    if (!read_object()) return false;
    cells_.assign(columns_->size(), std::string());
    for (size_t i = 0; i < columns_->size(); ++i) {
      const json::value* v = object_.if_contains((*columns_)[i]);
      if (v == nullptr || v->is_null()) continue;
      std::string& cell = cells_[i];
      if (v->is_string()) {
        cell = std::string(v->as_string());  // ("" is missing, as an empty CSV cell)
      } else if (v->is_bool()) {
        cell = v->as_bool() ? "true" : "false";
      } else if (v->is_int64()) {
        cell = std::to_string(v->as_int64());
      } else if (v->is_uint64()) {
        cell = std::to_string(v->as_uint64());
      } else if (v->is_double()) {
        char buffer[32];
        cell.assign(buffer, std::to_chars(buffer, buffer + sizeof buffer, v->as_double()).ptr);
      } else if (v->is_array()) {
        list_cell(v->as_array(), (*columns_)[i], cell);
      } else {
        fail(Kind::kBadRecord,
             source_ + ": line " + std::to_string(record_line_) + ", field '" + (*columns_)[i] +
                 "': an object is not a table value",
             record_line_, (*columns_)[i]);
      }
    }
    for (const std::string& c : cells_) fields.emplace_back(c);
    return true;
  }
  uint64_t line() const override { return record_line_; }

 private:
  // A list of ids (tags, a user's last items) as one cell: its strings and numbers joined by '|',
  // which a job splits again (preprocessing "separator": "|"); [] is missing.
  void list_cell(const json::array& items, const std::string& column, std::string& cell) {
    for (const json::value& e : items) {
      std::string item;
      if (e.is_string()) item = std::string(e.as_string());
      else if (e.is_int64()) item = std::to_string(e.as_int64());
      else if (e.is_uint64()) item = std::to_string(e.as_uint64());
      const bool bad = item.empty() ? !e.is_string() : item.find('|') != std::string::npos;
      if (bad) {
        fail(Kind::kBadRecord,
             source_ + ": line " + std::to_string(record_line_) + ", field '" + column + "': " +
                 (item.empty() ? "a list holds strings and whole numbers (ids), not " + json::serialize(e)
                               : "an id in a list may not hold '|' (the list is stored joined by it): " + json::serialize(e)),
             record_line_, column);
      }
      if (!cell.empty()) cell += '|';
      cell += item;
    }
  }

  // The next non-blank line as an object; false at the end.
  bool read_object() {
    std::string text;
    for (;;) {
      if (!std::getline(*in_, text)) return false;
      ++line_;
      if (text.size() > max_bytes_) {
        fail(Kind::kTooLarge, source_ + ": line " + std::to_string(line_) + " is longer than the cap of " + std::to_string(max_bytes_) + " bytes",
             line_);
      }
      if (!text.empty() && text.back() == '\r') text.pop_back();
      if (line_ == 1 && text.starts_with("\xEF\xBB\xBF")) text.erase(0, 3);
      if (text.find_first_not_of(" \t") == std::string::npos) continue;
      record_line_ = line_;
      boost::system::error_code ec;
      json::parse_options opts;
      opts.max_depth = 8;
      const json::value v = parse_json(text, ec, opts);
      if (ec || !v.is_object()) {
        fail(Kind::kBadRecord,
             source_ + ": line " + std::to_string(line_) + ": not a JSON object" + (ec ? " (" + ec.message() + ")" : std::string()),
             line_);
      }
      object_ = v.as_object();
      return true;
    }
  }

  std::unique_ptr<std::istream> in_;
  const std::string& source_;
  uint64_t max_bytes_;
  const std::vector<std::string>* columns_;
  bool header_done_ = false;
  uint64_t line_ = 0, record_line_ = 0;
  json::object object_;
  std::vector<std::string> cells_;
};

}  // namespace

ExampleSummary stream_jsonl(const StreamOpener& open, const std::string& source, const CsvOptions& options, ExampleSink& sink) {
  const std::vector<std::string> columns = JsonlSource::keys(open_checked(open, source), source, options.max_line_bytes);
  return stream_table(
      [&]() -> std::unique_ptr<Records> {
        return std::make_unique<JsonlSource>(open_checked(open, source), source, options.max_line_bytes, &columns);
      },
      source, options, sink, ',');
}

ParsedExamples parse_jsonl(std::istream& in, const std::string& source, const CsvOptions& options) {
  return parse_in_memory(in, source, options, &stream_jsonl);
}

}  // namespace pstrain
