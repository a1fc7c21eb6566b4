// What the engine tests that check a layer against a Python reference (recurrent_test.cc,
// attention_test.cc and their *_reference.py) write for the script to read: raw float64 arrays.
#pragma once

#include <cstddef>
#include <fstream>
#include <string>

namespace pstrain::testing {

// `n` doubles at `v` to `path`, little-endian as they lie (the scripts read them as "<f8").
inline void write_doubles(const std::string& path, const double* v, size_t n) {
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(v), static_cast<std::streamsize>(n * sizeof(double)));
}

}  // namespace pstrain::testing
