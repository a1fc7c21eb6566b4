// What every binary's main() does the same way: parse flags (answering --help and reporting
// flag errors), set the log level, read and write whole files.
#pragma once

#include <optional>
#include <span>
#include <string>

#include "common/base/flags.h"

namespace pstrain {

// Parses argv. Returns an exit status when main should return at once (--help: 0, a bad flag:
// 2, with the message printed as "<program>: <error>"), nullopt to go on.
std::optional<int> parse_flags(FlagSet& flags, int argc, char** argv, const std::string& program);

// Sets the log level from the --log-level flag; throws pstrain::Error for a bad value.
void apply_log_level(const FlagSet& flags);

// Whole files; errors throw pstrain::Error naming the file.
std::string read_text_file(const std::string& path, const std::string& what);
void write_floats(const std::string& path, std::span<const float> values);

}  // namespace pstrain
