// What every fuzz target does when an invariant it checks does not hold: print it and abort, so
// libFuzzer keeps the input as a crash (fuzz/run.sh leaves it in build-fuzz/crashes/).
#pragma once

#include <cstdio>
#include <cstdlib>
#include <string>

namespace pstrain::fuzz {

[[noreturn]] inline void broken(const std::string& what) {
  std::fprintf(stderr, "invariant broken: %s\n", what.c_str());
  std::abort();
}

inline void check(bool ok, const char* what) {
  if (!ok) broken(what);
}

}  // namespace pstrain::fuzz
