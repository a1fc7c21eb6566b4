// IDX pairs of datasets (images and labels, gzip'd or plain: the MNIST files), streamed into an
// ExampleSink like the other array formats.
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "common/data/dataset_formats.h"
#include "common/data/format_parts.h"

namespace pstrain {

using namespace format_detail;

namespace {

// A gzip'd or plain file (zlib reads plain files transparently).
class GzSource : public ByteSource {
 public:
  explicit GzSource(const std::string& path) : path_(path), file_(gzopen(path.c_str(), "rb")) {
    if (file_ == nullptr) fail(Kind::kUnreadable, path + ": cannot open: " + std::strerror(errno));
    gzbuffer(file_, 1 << 20);
  }
  ~GzSource() override { gzclose(file_); }
  GzSource(const GzSource&) = delete;
  GzSource& operator=(const GzSource&) = delete;
  size_t read(void* data, size_t n) override {
    const int got = gzread(file_, data, static_cast<unsigned>(std::min<size_t>(n, 1u << 30)));
    if (got < 0) {
      int code = 0;
      fail(Kind::kUnreadable, path_ + ": not a readable gzip or IDX file: " + gzerror(file_, &code));
    }
    return static_cast<size_t>(got);
  }

 private:
  std::string path_;
  gzFile file_;
};

// An IDX header of unsigned bytes (type 0x08) with `rank` dimensions.
std::vector<uint64_t> read_idx_header(ByteSource& src, const std::string& source, int rank, const char* role) {
  uint8_t magic[4];
  read_exactly(src, magic, 4, source, "IDX header");
  if (magic[0] != 0 || magic[1] != 0) fail(Kind::kBadNpyHeader, source + ": not an IDX file (bad magic)");
  if (magic[2] != 0x08) {
    fail(Kind::kBadDtype, source + ": IDX type 0x" + std::to_string(magic[2]) + " is not unsigned bytes (0x08)");
  }
  if (magic[3] != rank) {
    fail(Kind::kBadRank, source + ": " + role + " must have " + std::to_string(rank) + " dimensions, not " +
                             std::to_string(magic[3]));
  }
  std::vector<uint64_t> dims(static_cast<size_t>(rank));
  for (auto& d : dims) {
    uint8_t b[4];
    read_exactly(src, b, 4, source, "IDX dimensions");
    d = (uint64_t{b[0]} << 24) | (uint64_t{b[1]} << 16) | (uint64_t{b[2]} << 8) | b[3];
  }
  return dims;
}

}  // namespace

ExampleSummary stream_idx(const std::string& images_path, const std::string& labels_path, const ExampleLimits& limits,
                          ExampleSink& sink) {
  ExampleSummary out;
  ClassCounter classes(labels_path);
  std::vector<int32_t> labels;
  {
    GzSource src(labels_path);
    const uint64_t n = read_idx_header(src, labels_path, 1, "labels")[0];
    if (n == 0) fail(Kind::kEmpty, labels_path + ": no labels");
    if (n > limits.max_examples) {
      fail(Kind::kTooLarge, labels_path + ": " + std::to_string(n) + " labels exceed the cap of " +
                                std::to_string(limits.max_examples));
    }
    std::vector<uint8_t> bytes(n);
    read_exactly(src, bytes.data(), n, labels_path, "labels");
    expect_end(src, labels_path, n);
    labels.resize(n);
    for (uint64_t i = 0; i < n; ++i) {
      check_label(bytes[i], limits, labels_path + ": example " + std::to_string(i));
      labels[i] = bytes[i];
      classes.add(labels[i]);
    }
  }
  {
    GzSource src(images_path);
    const std::vector<uint64_t> dims = read_idx_header(src, images_path, 3, "images");
    if (dims[0] != labels.size()) {
      fail(Kind::kLengthMismatch, images_path + ": holds " + std::to_string(dims[0]) + " images, " + labels_path +
                                      " holds " + std::to_string(labels.size()) + " labels");
    }
    if (dims[1] == 0 || dims[2] == 0) fail(Kind::kBadRank, images_path + ": an image dimension is 0");
    const uint64_t per_example = dims[1] * dims[2];
    if (per_example > limits.max_bytes / dims[0]) {
      fail(Kind::kTooLarge, images_path + ": the images exceed the cap of " + std::to_string(limits.max_bytes) + " bytes");
    }
    out.shape = {static_cast<uint32_t>(dims[1]), static_cast<uint32_t>(dims[2]), 1};
    out.dtype = ParsedExamples::Dtype::kUint8;
    out.examples = dims[0];
    sink.begin(out.shape, out.dtype);
    const uint64_t total = dims[0] * per_example;
    std::vector<uint8_t> piece(std::min<uint64_t>(total, 1 << 20));
    for (uint64_t done = 0; done < total;) {
      const size_t n = static_cast<size_t>(std::min<uint64_t>(piece.size(), total - done));
      read_exactly(src, piece.data(), n, images_path, "images");
      sink.examples(piece.data(), n);
      done += n;
    }
    expect_end(src, images_path, total);
  }
  sink.labels(labels.data(), labels.size());
  classes.finish(out);
  return out;
}

}  // namespace pstrain
