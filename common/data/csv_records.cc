#include "common/data/csv_records.h"

#include "common/data/format_parts.h"
#include "common/data/text_profile.h"

namespace pstrain {

using format_detail::fail;
using format_detail::Kind;

char detect_csv_separator(std::istream& in, uint64_t max_bytes) {
  uint64_t counts[3] = {0, 0, 0};  // ',', ';', '\t'
  bool quoted = false;
  std::streambuf* buf = in.rdbuf();
  for (uint64_t n = 0; n < max_bytes; ++n) {
    const int c = buf->sbumpc();
    if (c == std::char_traits<char>::eof()) break;
    if (c == '"') quoted = !quoted;
    if (quoted) continue;
    if (c == '\n' || c == '\r') break;
    if (c == ',') ++counts[0];
    if (c == ';') ++counts[1];
    if (c == '\t') ++counts[2];
  }
  if (counts[1] > counts[0] && counts[1] >= counts[2]) return ';';
  if (counts[2] > counts[0] && counts[2] > counts[1]) return '\t';
  return ',';
}

CsvRecords::CsvRecords(std::istream& in, std::string source, char separator, uint64_t max_record_bytes)
    : in_(in), source_(std::move(source)), separator_(separator), max_record_bytes_(max_record_bytes), buffer_(1 << 16) {}

int CsvRecords::peek() {
  if (pos_ == end_) {
    if (eof_) return -1;
    in_.read(buffer_.data(), static_cast<std::streamsize>(buffer_.size()));
    end_ = static_cast<size_t>(in_.gcount());
    pos_ = 0;
    if (end_ == 0) {
      eof_ = true;
      if (in_.bad()) fail(Kind::kUnreadable, source_ + ": read error at line " + std::to_string(line_), line_);
      return -1;
    }
  }
  return static_cast<unsigned char>(buffer_[pos_]);
}

int CsvRecords::get() {
  const int c = peek();
  if (c >= 0) ++pos_;
  return c;
}

void CsvRecords::fail_at(uint64_t line, const std::string& what) const {
  fail(Kind::kQuotedField, source_ + ": line " + std::to_string(line) + ": " + what, line);
}

bool CsvRecords::next(std::vector<std::string_view>& fields) {
  std::string carried;  // bytes of a partial byte order mark: they start the first field
  if (!started_) {
    started_ = true;
    static constexpr unsigned char kBom[3] = {0xEF, 0xBB, 0xBF};
    while (carried.size() < 3 && peek() == kBom[carried.size()]) carried.push_back(static_cast<char>(get()));
    if (carried.size() == 3) carried.clear();
  }
  const auto is_space = [this](int c) { return c == ' ' || (c == '\t' && separator_ != '\t'); };
  for (;;) {
    if (peek() < 0 && carried.empty()) return false;
    record_line_ = line_;
    spans_.clear();
    record_.clear();
    bool any_quoted = false;
    bool at_end = false;
    while (!at_end) {
      // One field.
      const size_t start = record_.size();
      record_ += carried;
      const bool quotable = carried.empty();
      carried.clear();
      while (is_space(peek())) record_.push_back(static_cast<char>(get()));
      if (quotable && peek() == '"') {
        any_quoted = true;
        record_.resize(start);  // spaces before the quote are not part of the field
        get();
        const uint64_t opened = line_;
        for (;;) {
          const int c = get();
          if (c < 0) fail_at(opened, "a quoted field is not closed before the end of the file");
          if (c == '"') {
            if (peek() != '"') break;
            get();
          } else if (c == '\n' || (c == '\r' && peek() != '\n')) {
            ++line_;
          }
          record_.push_back(static_cast<char>(c));
          if (record_.size() + spans_.size() > max_record_bytes_) too_long();
        }
        spans_.emplace_back(start, record_.size() - start);
        while (is_space(peek())) get();
        const int c = get();
        if (c == separator_) continue;
        if (c == '\r' && peek() == '\n') get();
        if (c < 0 || c == '\n' || c == '\r') {
          if (c >= 0) ++line_;
          at_end = true;
          continue;
        }
        fail_at(line_, "unexpected '" + std::string(1, static_cast<char>(c)) +
                           "' after a closing quote (a quote inside a quoted field is written twice: \"\")");
      }
      for (;;) {
        const int c = get();
        if (c < 0 || c == '\n' || c == '\r' || c == separator_) {
          while (record_.size() > start && is_space(static_cast<unsigned char>(record_.back()))) record_.pop_back();
          size_t first = start;
          while (first < record_.size() && is_space(static_cast<unsigned char>(record_[first]))) ++first;
          spans_.emplace_back(first, record_.size() - first);
          if (c == separator_) break;
          if (c == '\r' && peek() == '\n') get();
          if (c >= 0) ++line_;
          at_end = true;
          break;
        }
        record_.push_back(static_cast<char>(c));
        if (record_.size() + spans_.size() > max_record_bytes_) too_long();
      }
    }
    // A blank line: one empty unquoted field.
    if (spans_.size() == 1 && spans_[0].second == 0 && !any_quoted) continue;
    fields.clear();
    for (const auto& [s, n] : spans_) fields.emplace_back(record_.data() + s, n);
    for (size_t k = 0; k < fields.size(); ++k) {
      if (utf8_error(fields[k])) {
        fail(Kind::kBadEncoding,
             source_ + ": line " + std::to_string(record_line_) + ", field " + std::to_string(k + 1) +
                 ": the text is not UTF-8 (save the file as UTF-8)",
             record_line_);
      }
    }
    return true;
  }
}

void CsvRecords::too_long() const {
  fail(Kind::kTooLarge,
       source_ + ": line " + std::to_string(record_line_) + ": a record is longer than the cap of " +
           std::to_string(max_record_bytes_) + " bytes",
       record_line_);
}

}  // namespace pstrain
