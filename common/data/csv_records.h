// Reading CSV text as records (RFC 4180): fields separated by one character (',', ';' or a tab),
// records ended by "\n", "\r\n" or a lone "\r", fields optionally in double quotes, where a quoted
// field may hold the separator, line breaks and quotes written twice (""). A UTF-8 byte order mark
// before the first record is skipped.
//
// Chosen leniencies, as spreadsheets and pandas read such files: an unquoted field is trimmed of
// spaces (and of tabs, unless the tab is the separator) and may contain a '"' as an ordinary
// character; spaces after a closing quote are ignored; a record of one empty unquoted field (a
// blank line) is skipped. A quoted field is kept exactly as written between its quotes.
// What remains an error (DatasetFormatError, naming the line): text after a closing quote other
// than the separator or the record's end, a quote still open at the end of the input, a record
// longer than the cap.
//
// Thread rules: a CsvRecords belongs to one thread; it reads its istream, which it borrows.
#pragma once

#include <cstdint>
#include <istream>
#include <string>
#include <string_view>
#include <vector>

namespace pstrain {

// The separator the header line uses: the one of ',', ';' and '\t' that occurs most often in it
// outside quotes (',' when none does, or on a tie ',' before ';' before '\t'). Reads up to the
// first line break outside quotes (at most max_bytes).
char detect_csv_separator(std::istream& in, uint64_t max_bytes);

class CsvRecords {
 public:
  CsvRecords(std::istream& in, std::string source, char separator, uint64_t max_record_bytes);

  // The next record's fields (views valid until the next call), or false at the end of input.
  bool next(std::vector<std::string_view>& fields);
  // The line the last record returned by next() started on (1-based, counting every line break).
  uint64_t line() const { return record_line_; }
  char separator() const { return separator_; }

 private:
  int get();   // the next byte, or -1 at the end
  int peek();
  [[noreturn]] void fail_at(uint64_t line, const std::string& what) const;
  [[noreturn]] void too_long() const;

  std::istream& in_;
  std::string source_;
  char separator_;
  uint64_t max_record_bytes_;
  uint64_t line_ = 1;         // of the next byte
  uint64_t record_line_ = 0;
  bool started_ = false;  // the byte order mark was looked for
  std::vector<char> buffer_;
  size_t pos_ = 0, end_ = 0;
  bool eof_ = false;
  std::string record_;  // the current record's fields, back to back
  std::vector<std::pair<size_t, size_t>> spans_;  // (start, length) into record_
};

}  // namespace pstrain
