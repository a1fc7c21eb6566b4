// pstrain: the command-line client of a pstrain coordinator (commands.h). main() reads the
// environment once and hands everything to run_cli.
#include <unistd.h>

#include <boost/json/src.hpp>  // Boost.JSON, header-only: compiled once per binary, here

#include <cstdlib>
#include <optional>
#include <iostream>
#include <string>
#include <vector>

#include "cli/commands.h"

int main(int argc, char** argv) {
  auto env_value = [](const char* name) -> std::optional<std::string> {
    const char* v = std::getenv(name);
    if (v == nullptr || *v == '\0') return std::nullopt;
    return std::string(v);
  };
  pstrain::cli::Environment env;
  env.url = env_value("PSTRAIN_URL");
  env.token = env_value("PSTRAIN_TOKEN");
  env.cacert = env_value("PSTRAIN_CACERT");
  env.follow = env_value("PSTRAIN_FOLLOW");
  env.stdout_is_tty = isatty(STDOUT_FILENO) == 1;
  std::ios::sync_with_stdio(false);
  const std::vector<std::string> args(argv + 1, argv + argc);
  const int code = pstrain::cli::run_cli(args, env, std::cout, std::cerr);
  std::cout.flush();
  return code;
}
