#include "common/base/process_main.h"

#include <fstream>
#include <iostream>
#include <sstream>

#include "common/base/error.h"
#include "common/base/log.h"

namespace pstrain {

std::optional<int> parse_flags(FlagSet& flags, int argc, char** argv, const std::string& program) {
  switch (flags.parse(argc, argv)) {
    case FlagSet::Outcome::kHelpShown:
      std::cout << flags.help();
      return 0;
    case FlagSet::Outcome::kError:
      std::cerr << program << ": " << flags.error() << "\n";
      return 2;
    case FlagSet::Outcome::kRun:
      break;
  }
  return std::nullopt;
}

void apply_log_level(const FlagSet& flags) {
  LogLevel level;
  if (!parse_log_level(flags.get("log-level"), &level)) {
    throw Error("--log-level must be debug, info, warning or error, not '" + flags.get("log-level") + "'");
  }
  set_log_level(level);
}

std::string read_text_file(const std::string& path, const std::string& what) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(path + ": cannot open " + what);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

void write_floats(const std::string& path, std::span<const float> values) {
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(values.data()), static_cast<std::streamsize>(values.size_bytes()));
  if (!out) throw Error(path + ": cannot write the parameters");
}

}  // namespace pstrain
