#include "common/base/flags.h"

#include <cerrno>
#include <cstdlib>
#include <iomanip>
#include <sstream>

#include "common/base/error.h"

namespace pstrain {

FlagSet::FlagSet(std::string program, std::string summary)
    : program_(std::move(program)), summary_(std::move(summary)) {}

void FlagSet::add(std::string name, std::string env, std::string default_value, std::string help) {
  flags_.push_back({std::move(name), std::move(env), std::move(default_value), std::move(help), false, {}});
}

void FlagSet::add_switch(std::string name, std::string env, std::string help, bool on_by_default) {
  flags_.push_back({std::move(name), std::move(env), on_by_default ? "true" : "false", std::move(help), true, {}});
}

FlagSet::Outcome FlagSet::parse(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--help" || arg == "-h") return Outcome::kHelpShown;
    if (arg.rfind("--", 0) != 0) {
      error_ = "unexpected argument '" + arg + "' (flags look like --name=value; see --help)";
      return Outcome::kError;
    }
    std::string name = arg.substr(2);
    std::optional<std::string> value;
    if (const auto eq = name.find('='); eq != std::string::npos) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
    }
    Flag* flag = nullptr;
    for (auto& f : flags_) {
      if (f.name == name) flag = &f;
    }
    if (flag == nullptr) {
      error_ = "unknown flag --" + name + " (see --help)";
      return Outcome::kError;
    }
    if (flag->is_switch) {
      flag->given = value.value_or("true");
      continue;
    }
    if (!value) {
      if (i + 1 >= argc) {
        error_ = "flag --" + name + " needs a value";
        return Outcome::kError;
      }
      value = argv[++i];
    }
    flag->given = *value;
  }
  return Outcome::kRun;
}

std::string FlagSet::help() const {
  std::ostringstream out;
  out << "Usage: " << program_ << " [flags]\n\n" << summary_ << "\n\nFlags (environment variable, default):\n";
  for (const auto& f : flags_) {
    out << "  --" << f.name << (f.is_switch ? "" : "=VALUE") << "\n      " << f.help << "\n      ";
    out << (f.env.empty() ? "no environment variable" : "env " + f.env);
    if (!f.is_switch) out << "; default " << (f.default_value.empty() ? "(none)" : "'" + f.default_value + "'");
    if (f.is_switch && f.default_value == "true") out << "; on by default (--" << f.name << "=false turns it off)";
    out << "\n";
  }
  out << "  --help\n      Print this help and exit.\n";
  return out.str();
}

const FlagSet::Flag& FlagSet::find(const std::string& name) const {
  for (const auto& f : flags_) {
    if (f.name == name) return f;
  }
  throw Error("internal: flag --" + name + " was never declared");
}

std::string FlagSet::get(const std::string& name) const {
  const Flag& f = find(name);
  if (f.given) return *f.given;
  if (!f.env.empty()) {
    if (const char* v = std::getenv(f.env.c_str()); v != nullptr && *v != '\0') return v;
  }
  return f.default_value;
}

bool FlagSet::get_switch(const std::string& name) const {
  const std::string v = get(name);
  if (v == "1" || v == "true" || v == "yes") return true;
  if (v == "0" || v == "false" || v == "no" || v.empty()) return false;
  throw Error("--" + name + " must be true or false, not '" + v + "'");
}

int64_t FlagSet::get_int(const std::string& name, int64_t min, int64_t max) const {
  const std::string v = get(name);
  errno = 0;
  char* end = nullptr;
  const long long n = std::strtoll(v.c_str(), &end, 10);
  if (v.empty() || *end != '\0' || errno == ERANGE || n < min || n > max) {
    throw Error("--" + name + " must be an integer from " + std::to_string(min) + " to " + std::to_string(max) +
                ", not '" + v + "'");
  }
  return n;
}

double FlagSet::get_double(const std::string& name, double min, double max) const {
  const std::string v = get(name);
  char* end = nullptr;
  const double x = std::strtod(v.c_str(), &end);
  if (v.empty() || *end != '\0' || !(x >= min && x <= max)) {
    std::ostringstream range;
    range << min << " to " << max;
    throw Error("--" + name + " must be a number from " + range.str() + ", not '" + v + "'");
  }
  return x;
}

}  // namespace pstrain
