// Reader for IDX files, the format of the MNIST distribution, gzip-compressed or plain.
//
// Layout: a big-endian header (two zero bytes, a type byte, a dimension count, then one uint32
// per dimension) followed by the raw values. Only unsigned bytes (type 0x08) are accepted: that is
// what every MNIST-style image and label file uses.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace pstrain {

struct IdxArray {
  std::vector<uint32_t> dims;   // e.g. {60000, 28, 28} for images, {60000} for labels
  std::vector<uint8_t> values;  // product(dims) bytes, row-major
};

// Reads `path`, transparently decompressing gzip. Every defect (missing file, wrong magic,
// unsupported type, dimension count other than `expected_rank`, truncated or over-long data)
// throws DataError with a message naming the file and what is wrong.
IdxArray read_idx(const std::string& path, int expected_rank);

}  // namespace pstrain
