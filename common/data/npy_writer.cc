// NpyFileWriter (dataset_formats.h): an upload's examples and labels as the .npy pair the catalog
// stores.
#include <cerrno>
#include <cstring>
#include <fstream>

#include "common/data/dataset_formats.h"
#include "common/data/format_parts.h"

namespace pstrain {

using namespace format_detail;

// ---------------------------------------------------------------------------------------------
// Writing .npy

namespace {

// Version 1.0 header padded to kNpyHeaderBytes in all, so a writer can put it first and fill in
// the example count at the end. 128 bytes hold any shape of up to 4 dimensions of 2^32.
constexpr size_t kNpyHeaderBytes = 128;

std::string npy_header(const char* descr, const std::vector<uint64_t>& shape) {
  std::string dict = std::string("{'descr': '") + descr + "', 'fortran_order': False, 'shape': " + shape_text(shape) + ", }";
  std::string header = std::string("\x93NUMPY\x01\x00", 8) + "  " + dict;
  if (header.size() + 1 > kNpyHeaderBytes) throw Error("an .npy header of shape " + shape_text(shape) + " is too long");
  header.resize(kNpyHeaderBytes - 1, ' ');
  header.push_back('\n');
  const size_t len = kNpyHeaderBytes - 10;
  header[8] = static_cast<char>(len & 0xff);
  header[9] = static_cast<char>(len >> 8);
  return header;
}

const char* npy_descr(ParsedExamples::Dtype dtype) { return dtype == ParsedExamples::Dtype::kUint8 ? "|u1" : "<f4"; }

}  // namespace

NpyFileWriter::NpyFileWriter(std::string x_path, std::string y_path) : x_path_(std::move(x_path)), y_path_(std::move(y_path)) {
  x_.open(x_path_, std::ios::binary | std::ios::trunc);
  if (!x_) throw Error(x_path_ + ": cannot create: " + std::strerror(errno));
  x_.write(std::string(kNpyHeaderBytes, ' ').data(), kNpyHeaderBytes);  // the header comes at the end
}

void NpyFileWriter::begin(const std::vector<uint32_t>& shape, ParsedExamples::Dtype dtype) {
  shape_ = shape;
  dtype_ = dtype;
}

void NpyFileWriter::examples(const uint8_t* bytes, size_t n) {
  x_.write(reinterpret_cast<const char*>(bytes), static_cast<std::streamsize>(n));
  if (!x_) throw Error(x_path_ + ": write failed: " + std::strerror(errno));
}

void NpyFileWriter::labels(const int32_t* labels, size_t n) { labels_.insert(labels_.end(), labels, labels + n); }

void NpyFileWriter::targets(const float* values, size_t n) { targets_.insert(targets_.end(), values, values + n); }

void NpyFileWriter::finish() {
  uint64_t example_bytes = ParsedExamples::dtype_size(dtype_);
  for (uint32_t d : shape_) example_bytes *= d;
  const auto written = static_cast<uint64_t>(x_.tellp()) - kNpyHeaderBytes;
  const uint64_t examples = example_bytes > 0 ? written / example_bytes : 0;
  std::vector<uint64_t> x_shape = {targets_.empty() ? labels_.size() : examples};
  x_shape.insert(x_shape.end(), shape_.begin(), shape_.end());
  x_.seekp(0);
  x_.write(npy_header(npy_descr(dtype_), x_shape).data(), kNpyHeaderBytes);
  x_.close();
  if (!x_) throw Error(x_path_ + ": write failed: " + std::strerror(errno));
  std::ofstream y(y_path_, std::ios::binary | std::ios::trunc);
  if (!targets_.empty()) {  // regression: (n,) for one target per example, else (n, k)
    const uint64_t width = examples > 0 ? targets_.size() / examples : 1;
    const std::vector<uint64_t> y_shape = width == 1 ? std::vector<uint64_t>{examples} : std::vector<uint64_t>{examples, width};
    y.write(npy_header("<f4", y_shape).data(), kNpyHeaderBytes);
    y.write(reinterpret_cast<const char*>(targets_.data()), static_cast<std::streamsize>(targets_.size() * sizeof(float)));
  } else {
    y.write(npy_header("<i4", {labels_.size()}).data(), kNpyHeaderBytes);
    y.write(reinterpret_cast<const char*>(labels_.data()), static_cast<std::streamsize>(labels_.size() * sizeof(int32_t)));
  }
  y.close();
  if (!y) throw Error(y_path_ + ": write failed: " + std::strerror(errno));
}

}  // namespace pstrain
