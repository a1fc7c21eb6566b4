// Command-line flags with environment-variable fallbacks, parsed once in main into typed
// structs. Precedence: --flag on the command line, then the environment variable, then the
// default. `--help` prints every flag with its variable and default.
//
// Thread rules: used by main only, before any thread starts.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace pstrain {

class FlagSet {
 public:
  FlagSet(std::string program, std::string summary);

  // A flag taking a value. `env` may be empty (no environment fallback).
  void add(std::string name, std::string env, std::string default_value, std::string help);
  // A flag without a value (--name, or --name=false to turn off one that is on by default); its
  // environment variable is true for "1", "true" or "yes", false for "0", "false" or "no"; set
  // but empty, it counts as unset (the default).
  void add_switch(std::string name, std::string env, std::string help, bool on_by_default = false);

  enum class Outcome { kRun, kHelpShown, kError };
  // Parses argv. On kError, error() says what is wrong (unknown flag, missing value).
  Outcome parse(int argc, char** argv);
  const std::string& error() const { return error_; }
  std::string help() const;

  std::string get(const std::string& name) const;
  bool get_switch(const std::string& name) const;
  // Throws pstrain::Error "--name must be ..." if the value is not an integer in [min, max].
  int64_t get_int(const std::string& name, int64_t min, int64_t max) const;
  double get_double(const std::string& name, double min, double max) const;

 private:
  struct Flag {
    std::string name, env, default_value, help;
    bool is_switch = false;
    std::optional<std::string> given;
  };
  const Flag& find(const std::string& name) const;

  std::string program_, summary_, error_;
  std::vector<Flag> flags_;
};

}  // namespace pstrain
