// Line-oriented logging to stderr: `PSLOG(kInfo) << "server " << id << " ready";`
//
// Each line is written with one write() call, so lines from different threads do not interleave.
// The level threshold is the one process-wide setting of the project (set once by main from its
// flags); everything else is passed explicitly.
#pragma once

#include <sstream>
#include <string_view>

namespace pstrain {

enum class LogLevel { kDebug = 0, kInfo = 1, kWarning = 2, kError = 3 };

void set_log_level(LogLevel level);
LogLevel log_level();
// "debug", "info", "warning", "error"; returns false for anything else.
bool parse_log_level(std::string_view text, LogLevel* level);

class LogLine {
 public:
  explicit LogLine(LogLevel level);
  ~LogLine();
  LogLine(const LogLine&) = delete;
  LogLine& operator=(const LogLine&) = delete;
  template <typename V>
  LogLine& operator<<(const V& value) {
    stream_ << value;
    return *this;
  }

 private:
  std::ostringstream stream_;
};

}  // namespace pstrain

#define PSLOG(level)                                                       \
  if (::pstrain::LogLevel::level < ::pstrain::log_level()) {               \
  } else                                                                   \
    ::pstrain::LogLine(::pstrain::LogLevel::level)
