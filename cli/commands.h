// The `pstrain` command line: parses the arguments and runs one command against the REST API.
//   pstrain [--url URL] [--token TOKEN] [--cacert FILE] [--json] COMMAND [ARGS]
// Commands: submit, list, status, follow, cancel, download, export, predict, study, cluster (`pstrain --help`, `pstrain
// COMMAND --help`). Returns the process's exit code (follow.h's ExitCode). Blocking; one thread.
#pragma once

#include <functional>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

namespace pstrain::cli {

struct Environment {
  std::optional<std::string> url;     // PSTRAIN_URL
  std::optional<std::string> token;   // PSTRAIN_TOKEN
  std::optional<std::string> cacert;  // PSTRAIN_CACERT: https's CA file
  std::optional<std::string> follow;  // PSTRAIN_FOLLOW: "poll" skips the event stream
  bool stdout_is_tty = false;
};

int run_cli(const std::vector<std::string>& args, const Environment& env, std::ostream& out, std::ostream& err);

}  // namespace pstrain::cli
