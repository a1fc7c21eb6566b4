#include "common/base/log.h"

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <ctime>

namespace pstrain {
namespace {

std::atomic<LogLevel>& threshold() {
  static std::atomic<LogLevel> level{LogLevel::kInfo};
  return level;
}

const char* level_tag(LogLevel level) {
  switch (level) {
    case LogLevel::kDebug: return "D";
    case LogLevel::kInfo: return "I";
    case LogLevel::kWarning: return "W";
    case LogLevel::kError: return "E";
  }
  return "?";
}

}  // namespace

void set_log_level(LogLevel level) { threshold().store(level); }
LogLevel log_level() { return threshold().load(std::memory_order_relaxed); }

bool parse_log_level(std::string_view text, LogLevel* level) {
  if (text == "debug") *level = LogLevel::kDebug;
  else if (text == "info") *level = LogLevel::kInfo;
  else if (text == "warning") *level = LogLevel::kWarning;
  else if (text == "error") *level = LogLevel::kError;
  else return false;
  return true;
}

LogLine::LogLine(LogLevel level) {
  const auto now = std::chrono::system_clock::now();
  const std::time_t secs = std::chrono::system_clock::to_time_t(now);
  const auto millis = std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count() % 1000;
  std::tm tm{};
  gmtime_r(&secs, &tm);
  char stamp[32];
  std::strftime(stamp, sizeof stamp, "%H:%M:%S", &tm);
  char ms[8];
  std::snprintf(ms, sizeof ms, ".%03d", static_cast<int>(millis));
  stream_ << level_tag(level) << ' ' << stamp << ms << ' ';
}

LogLine::~LogLine() {
  stream_ << '\n';
  const std::string line = stream_.str();
  ssize_t ignored = ::write(STDERR_FILENO, line.data(), line.size());
  (void)ignored;
}

}  // namespace pstrain
