// The NumPy array formats of datasets: .npy, and .npz archives of x and y (IDX pairs are in
// idx_format.cc).
#include <zip.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstring>
#include <fstream>
#include <limits>
#include <memory>

#include "common/data/dataset_formats.h"
#include "common/data/format_parts.h"

namespace pstrain {

using namespace format_detail;

namespace format_detail {

void read_exactly(ByteSource& src, void* data, size_t n, const std::string& source, const std::string& what) {
  auto* p = static_cast<uint8_t*>(data);
  size_t done = 0;
  while (done < n) {
    size_t got = src.read(p + done, n - done);
    if (got == 0) {
      fail(Kind::kTruncated, source + ": truncated " + what + ": " + std::to_string(done) + " of " +
                                 std::to_string(n) + " bytes present");
    }
    done += got;
  }
}

void expect_end(ByteSource& src, const std::string& source, uint64_t bytes) {
  uint8_t extra;
  if (src.read(&extra, 1) != 0) {
    fail(Kind::kTrailingData, source + ": data continues past the " + std::to_string(bytes) +
                                  " bytes the shape describes");
  }
}

}  // namespace format_detail

// ---------------------------------------------------------------------------------------------
// NPY

namespace {

class StreamSource : public ByteSource {
 public:
  StreamSource(std::istream& in, const std::string& source) : in_(in), source_(source) {}
  size_t read(void* data, size_t n) override {
    in_.read(static_cast<char*>(data), static_cast<std::streamsize>(n));
    if (in_.bad()) fail(Kind::kUnreadable, source_ + ": read error");
    return static_cast<size_t>(in_.gcount());
  }

 private:
  std::istream& in_;
  const std::string& source_;
};

// The source's name is kept by value: stream_npz names it with a temporary (path + ":y.npy"), and a
// reference to that dangled by the time a read failed, e.g. on a CRC error (found by
// fuzz/datasets_fuzz.cc, ASan: stack-use-after-scope).
class ZipEntrySource : public ByteSource {
 public:
  ZipEntrySource(zip_file_t* file, std::string source) : file_(file), source_(std::move(source)) {}
  size_t read(void* data, size_t n) override {
    zip_int64_t got = zip_fread(file_, data, n);
    if (got < 0) {
      fail(Kind::kUnreadable, source_ + ": cannot read: " + zip_error_strerror(zip_file_get_error(file_)));
    }
    return static_cast<size_t>(got);
  }

 private:
  zip_file_t* file_;
  std::string source_;
};

// A tiny reader for the Python dict literal of an .npy header:
//   {'descr': '<f4', 'fortran_order': False, 'shape': (3, 4), }
class HeaderParser {
 public:
  HeaderParser(std::string_view text, const std::string& source) : s_(text), source_(source) {}

  void parse(std::string& descr, bool& fortran, std::vector<uint64_t>& shape) {
    bool have_descr = false, have_fortran = false, have_shape = false;
    expect('{');
    for (;;) {
      skip_space();
      if (peek() == '}') break;
      std::string key = string_literal();
      expect(':');
      skip_space();
      if (key == "descr") {
        descr = string_literal();
        have_descr = true;
      } else if (key == "fortran_order") {
        fortran = boolean();
        have_fortran = true;
      } else if (key == "shape") {
        shape = tuple();
        have_shape = true;
      } else {
        bad("unexpected key '" + key + "'");
      }
      if (!more('}')) break;
    }
    if (!have_descr || !have_fortran || !have_shape) bad("missing 'descr', 'fortran_order' or 'shape'");
  }

 private:
  [[noreturn]] void bad(const std::string& what) {
    fail(Kind::kBadNpyHeader, source_ + ": malformed .npy header at offset " + std::to_string(pos_) + ": " + what);
  }
  char peek() { return pos_ < s_.size() ? s_[pos_] : '\0'; }
  // After an item: true at ',' (consumed; another item or `close` follows), false at `close`
  // (left for the caller).
  bool more(char close) {
    skip_space();
    if (peek() == ',') {
      ++pos_;
      return true;
    }
    if (peek() == close) return false;
    bad(std::string("expected ',' or '") + close + "'");
  }
  void skip_space() {
    while (pos_ < s_.size() && (s_[pos_] == ' ' || s_[pos_] == '\t' || s_[pos_] == '\n')) ++pos_;
  }
  void expect(char c) {
    skip_space();
    if (peek() != c) bad(std::string("expected '") + c + "'");
    ++pos_;
  }
  std::string string_literal() {
    skip_space();
    char quote = peek();
    if (quote != '\'' && quote != '"') bad("expected a string");
    size_t end = s_.find(quote, pos_ + 1);
    if (end == std::string_view::npos) bad("unterminated string");
    std::string value(s_.substr(pos_ + 1, end - pos_ - 1));
    pos_ = end + 1;
    return value;
  }
  bool boolean() {
    if (s_.substr(pos_, 4) == "True") {
      pos_ += 4;
      return true;
    }
    if (s_.substr(pos_, 5) == "False") {
      pos_ += 5;
      return false;
    }
    bad("expected True or False");
  }
  std::vector<uint64_t> tuple() {
    std::vector<uint64_t> dims;
    expect('(');
    for (;;) {
      skip_space();
      if (peek() == ')') break;
      uint64_t d = 0;
      auto [end, ec] = std::from_chars(s_.data() + pos_, s_.data() + s_.size(), d);
      if (ec != std::errc()) bad("expected a dimension");
      pos_ = static_cast<size_t>(end - s_.data());
      // numpy writes 2L on Python 2; tolerate the suffix.
      if (peek() == 'L') ++pos_;
      dims.push_back(d);
      if (dims.size() > 32) bad("more than 32 dimensions");
      if (!more(')')) break;
    }
    ++pos_;
    return dims;
  }

  std::string_view s_;
  const std::string& source_;
  size_t pos_ = 0;
};

uint32_t npy_dtype_size(NpyArray::Dtype dtype) {
  switch (dtype) {
    case NpyArray::Dtype::kUint8: return 1;
    case NpyArray::Dtype::kInt32: return 4;
    case NpyArray::Dtype::kFloat32: return 4;
    case NpyArray::Dtype::kInt64: return 8;
  }
  return 1;
}

struct NpyHeader {
  NpyArray::Dtype dtype = NpyArray::Dtype::kUint8;
  std::vector<uint64_t> shape;
  uint64_t bytes = 0;  // of the data that follows, checked against limits.max_bytes
};

// Reads an .npy preamble and header, leaving `src` at the first data byte.
NpyHeader read_npy_header(ByteSource& src, const std::string& source, const ExampleLimits& limits) {
  uint8_t preamble[8];
  read_exactly(src, preamble, sizeof preamble, source, ".npy preamble");
  if (std::memcmp(preamble, "\x93NUMPY", 6) != 0) {
    fail(Kind::kBadNpyHeader, source + ": not an .npy file (bad magic)");
  }
  const uint8_t major = preamble[6];
  uint32_t header_len = 0;
  if (major == 1) {
    uint8_t b[2];
    read_exactly(src, b, 2, source, ".npy header length");
    header_len = b[0] | (uint32_t{b[1]} << 8);
  } else if (major == 2 || major == 3) {
    uint8_t b[4];
    read_exactly(src, b, 4, source, ".npy header length");
    header_len = b[0] | (uint32_t{b[1]} << 8) | (uint32_t{b[2]} << 16) | (uint32_t{b[3]} << 24);
  } else {
    fail(Kind::kBadNpyHeader, source + ": unsupported .npy format version " + std::to_string(major));
  }
  constexpr uint32_t kMaxHeader = 64 << 10;
  if (header_len > kMaxHeader) {
    fail(Kind::kTooLarge, source + ": .npy header of " + std::to_string(header_len) + " bytes exceeds the cap of " +
                              std::to_string(kMaxHeader));
  }
  std::string header(header_len, '\0');
  read_exactly(src, header.data(), header_len, source, ".npy header");

  std::string descr;
  bool fortran = false;
  NpyHeader h;
  HeaderParser(header, source).parse(descr, fortran, h.shape);
  if (descr == "|u1" || descr == "<u1" || descr == ">u1") {
    h.dtype = NpyArray::Dtype::kUint8;
  } else if (descr == "<i4") {
    h.dtype = NpyArray::Dtype::kInt32;
  } else if (descr == "<i8") {
    h.dtype = NpyArray::Dtype::kInt64;
  } else if (descr == "<f4") {
    h.dtype = NpyArray::Dtype::kFloat32;
  } else {
    fail(Kind::kBadDtype, source + ": unsupported dtype '" + descr + "' (accepted: |u1, <i4, <i8, <f4)");
  }
  if (fortran) {
    fail(Kind::kFortranOrder, source + ": fortran_order is True; save the array in C order (numpy.ascontiguousarray)");
  }
  // Size, with overflow checks, before anything is allocated or read.
  uint64_t bytes = npy_dtype_size(h.dtype);
  for (uint64_t d : h.shape) {
    if (d != 0 && bytes > limits.max_bytes / d) {
      fail(Kind::kTooLarge, source + ": the array's size exceeds the cap of " + std::to_string(limits.max_bytes) +
                                " bytes");
    }
    bytes *= d;
  }
  if (bytes > limits.max_bytes) {
    fail(Kind::kTooLarge, source + ": the array's " + std::to_string(bytes) + " bytes exceed the cap of " +
                              std::to_string(limits.max_bytes));
  }
  h.bytes = bytes;
  return h;
}

NpyArray read_npy_from(ByteSource& src, const std::string& source, const ExampleLimits& limits) {
  NpyHeader h = read_npy_header(src, source, limits);
  NpyArray array;
  array.dtype = h.dtype;
  array.shape = std::move(h.shape);
  // Read in pieces, the buffer growing as they arrive: a header may claim up to limits.max_bytes
  // (2 GiB for uploads), and a file of a few bytes must not cost that much memory before it is
  // found truncated (found by fuzz/datasets_fuzz.cc: an .npz's y.npy allocated its claimed size).
  constexpr uint64_t kPiece = uint64_t{16} << 20;
  uint64_t done = 0;
  while (done < h.bytes) {
    const size_t n = static_cast<size_t>(std::min(h.bytes - done, kPiece));
    array.bytes.resize(static_cast<size_t>(done) + n);
    for (size_t got = 0; got < n;) {
      const size_t more = src.read(array.bytes.data() + done + got, n - got);
      if (more == 0) {
        fail(Kind::kTruncated, source + ": truncated array data: " + std::to_string(done + got) + " of " +
                                   std::to_string(h.bytes) + " bytes present");
      }
      got += more;
    }
    done += n;
  }
  expect_end(src, source, h.bytes);
  return array;
}

// Closes what libzip opened.
struct ZipCloser {
  void operator()(zip_t* z) const { zip_discard(z); }
  void operator()(zip_file_t* f) const { zip_fclose(f); }
};

std::unique_ptr<zip_file_t, ZipCloser> open_zip_entry(zip_t* archive, const std::string& path, const char* name) {
  zip_int64_t index = zip_name_locate(archive, name, 0);
  if (index < 0) {
    fail(Kind::kMissingArray, path + ": the archive has no '" + name + "' (save with numpy.savez(path, x=..., y=...))");
  }
  std::unique_ptr<zip_file_t, ZipCloser> file(zip_fopen_index(archive, static_cast<zip_uint64_t>(index), 0));
  if (!file) fail(Kind::kUnreadable, path + ":" + name + ": cannot open: " + zip_strerror(archive));
  return file;
}

}  // namespace

NpyArray read_npy(std::istream& in, const std::string& source, const ExampleLimits& limits) {
  StreamSource src(in, source);
  return read_npy_from(src, source, limits);
}

namespace {

// The array y: class labels (integers of rank 1), or regression targets (<f4 of shape (n,) or
// (n, k), each finite). Its header is read first (its length checks x's); its values are read
// after x, in pieces, straight to the sink, so a split's labels are never held here.
struct YHeader {
  NpyHeader npy;
  uint64_t n = 0;
  uint32_t width = 0;  // targets per example; 0 for labels
};

YHeader read_y_header(ByteSource& src, const std::string& ysource, const ExampleLimits& limits) {
  YHeader y;
  y.npy = read_npy_header(src, ysource, limits);
  const std::vector<uint64_t>& shape = y.npy.shape;
  if (y.npy.dtype == NpyArray::Dtype::kFloat32) {
    if (shape.empty() || shape.size() > 2) {
      fail(Kind::kBadRank, ysource + ": float targets must have shape (n,) or (n, k), not " + shape_text(shape));
    }
    const uint64_t width = shape.size() == 2 ? shape[1] : 1;
    if (width == 0 || width > 100'000) fail(Kind::kBadRank, ysource + ": " + std::to_string(width) + " targets per example");
    y.width = static_cast<uint32_t>(width);
  } else if (shape.size() != 1) {
    fail(Kind::kBadRank, ysource + ": labels must have rank 1, not shape " + shape_text(shape));
  }
  y.n = shape[0];
  if (y.n == 0) fail(Kind::kEmpty, ysource + ": no examples");
  if (y.n > limits.max_examples) {
    fail(Kind::kTooLarge, ysource + ": " + std::to_string(y.n) + " examples exceed the cap of " +
                              std::to_string(limits.max_examples));
  }
  return y;
}

// y's values (after its header) to the sink in pieces, each checked (a label in range, a target
// finite); completes the summary: class counts, or the targets' width.
void stream_y(ByteSource& src, const std::string& ysource, const YHeader& y, const ExampleLimits& limits,
              ClassCounter& classes, ExampleSink& sink, ExampleSummary& out) {
  const size_t value_bytes = npy_dtype_size(y.npy.dtype);
  constexpr uint64_t kPieceValues = 1 << 16;
  std::vector<uint8_t> piece;
  std::vector<int32_t> labels;
  std::vector<float> targets;
  const uint64_t values = y.width > 0 ? y.n * y.width : y.n;
  for (uint64_t at = 0; at < values;) {
    const auto n = static_cast<size_t>(std::min(kPieceValues, values - at));
    piece.resize(n * value_bytes);
    for (size_t got = 0; got < piece.size();) {
      const size_t more = src.read(piece.data() + got, piece.size() - got);
      if (more == 0) {
        fail(Kind::kTruncated, ysource + ": truncated array data: " + std::to_string(at * value_bytes + got) + " of " +
                                   std::to_string(y.npy.bytes) + " bytes present");
      }
      got += more;
    }
    if (y.width > 0) {
      targets.resize(n);
      std::memcpy(targets.data(), piece.data(), n * sizeof(float));
      for (size_t i = 0; i < n; ++i) {
        if (!std::isfinite(targets[i])) {
          const uint64_t k = at + i;
          fail(Kind::kNonFinite, ysource + ": target " + std::to_string(k % y.width) + " of example " +
                                     std::to_string(k / y.width) + " is " + (std::isnan(targets[i]) ? "NaN" : "infinite"));
        }
      }
      sink.targets(targets.data(), n);
    } else {
      labels.resize(n);
      for (size_t i = 0; i < n; ++i) {
        int64_t v = 0;
        switch (y.npy.dtype) {
          case NpyArray::Dtype::kUint8: v = piece[i]; break;
          case NpyArray::Dtype::kInt32: {
            int32_t w;
            std::memcpy(&w, piece.data() + i * 4, 4);
            v = w;
            break;
          }
          case NpyArray::Dtype::kInt64: std::memcpy(&v, piece.data() + i * 8, 8); break;
          case NpyArray::Dtype::kFloat32: break;  // targets, above
        }
        check_label(v, limits, ysource + ": example " + std::to_string(at + i));
        labels[i] = static_cast<int32_t>(v);
        classes.add(labels[i]);
      }
      sink.labels(labels.data(), n);
    }
    at += n;
  }
  expect_end(src, ysource, y.npy.bytes);
  if (y.width > 0) {
    out.target_width = y.width;
  } else {
    classes.finish(out);
  }
}

// The examples array x, checked against y's length and streamed to the sink in bounded pieces
// (float values checked finite on the way).
void stream_examples(ByteSource& src, const std::string& xsource, const std::string& pair, uint64_t n,
                     const ExampleLimits& limits, ExampleSink& sink, ExampleSummary& out) {
  NpyHeader x = read_npy_header(src, xsource, limits);
  if (x.dtype != NpyArray::Dtype::kUint8 && x.dtype != NpyArray::Dtype::kFloat32) {
    fail(Kind::kBadDtype, xsource + ": examples must be |u1 or <f4");
  }
  if (x.shape.size() < 2 || x.shape.size() > 4) {
    fail(Kind::kBadRank, xsource + ": examples must have shape (n, d), (n, h, w) or (n, h, w, c), not " +
                             shape_text(x.shape));
  }
  if (x.shape[0] != n) {
    fail(Kind::kLengthMismatch, pair + ": x holds " + std::to_string(x.shape[0]) + " examples, y holds " +
                                    std::to_string(n) + " labels");
  }
  for (size_t i = 1; i < x.shape.size(); ++i) {
    if (x.shape[i] == 0 || x.shape[i] > std::numeric_limits<uint32_t>::max()) {
      fail(Kind::kBadRank, xsource + ": example dimension " + std::to_string(i) + " of shape " +
                               shape_text(x.shape) + " is out of range");
    }
    out.shape.push_back(static_cast<uint32_t>(x.shape[i]));
  }
  if (out.shape.size() == 2) out.shape.push_back(1);  // (n, h, w) is (n, h, w, 1)
  out.dtype = x.dtype == NpyArray::Dtype::kUint8 ? ParsedExamples::Dtype::kUint8 : ParsedExamples::Dtype::kFloat32;
  out.examples = n;
  sink.begin(out.shape, out.dtype);
  uint64_t per_example = 1;
  for (uint32_t d : out.shape) per_example *= d;
  constexpr size_t kPiece = 1 << 20;  // a multiple of 4: float values never straddle pieces
  std::vector<uint8_t> piece(std::min<uint64_t>(kPiece, x.bytes));
  for (uint64_t done = 0; done < x.bytes;) {
    const size_t n_bytes = static_cast<size_t>(std::min<uint64_t>(kPiece, x.bytes - done));
    read_exactly(src, piece.data(), n_bytes, xsource, "array data");
    if (out.dtype == ParsedExamples::Dtype::kFloat32) {
      for (size_t i = 0; i < n_bytes / sizeof(float); ++i) {
        float v;
        std::memcpy(&v, piece.data() + i * sizeof(float), sizeof v);
        if (!std::isfinite(v) && !(limits.allow_nan && std::isnan(v))) {
          const uint64_t at = done / sizeof(float) + i;
          fail(Kind::kNonFinite, xsource + ": example " + std::to_string(at / per_example) + ", value " +
                                     std::to_string(at % per_example) + " is " + (std::isnan(v) ? "NaN" : "infinite"));
        }
      }
    }
    sink.examples(piece.data(), n_bytes);
    done += n_bytes;
  }
  expect_end(src, xsource, x.bytes);
}

}  // namespace

ExampleSummary stream_npz(const std::string& path, const ExampleLimits& limits, ExampleSink& sink) {
  int error = 0;
  std::unique_ptr<zip_t, ZipCloser> archive(zip_open(path.c_str(), ZIP_RDONLY, &error));
  if (!archive) {
    zip_error_t ze;
    zip_error_init_with_code(&ze, error);
    std::string why = zip_error_strerror(&ze);
    zip_error_fini(&ze);
    fail(Kind::kUnreadable, path + ": cannot open as an .npz (zip) archive: " + why);
  }
  // Both entries must exist before either is read: a missing y should not cost reading x.
  for (const char* name : {"x.npy", "y.npy"}) {
    if (zip_name_locate(archive.get(), name, 0) < 0) {
      fail(Kind::kMissingArray,
           path + ": the archive has no '" + name + "' (save with numpy.savez(path, x=..., y=...))");
    }
  }
  ExampleSummary out;
  ClassCounter classes(path);
  const std::string ysource = path + ":y.npy";
  YHeader y;
  {
    auto entry = open_zip_entry(archive.get(), path, "y.npy");
    ZipEntrySource src(entry.get(), ysource);
    y = read_y_header(src, ysource, limits);
  }
  {
    auto x = open_zip_entry(archive.get(), path, "x.npy");
    ZipEntrySource src(x.get(), path + ":x.npy");
    stream_examples(src, path + ":x.npy", path, y.n, limits, sink, out);
  }
  {
    auto entry = open_zip_entry(archive.get(), path, "y.npy");
    ZipEntrySource src(entry.get(), ysource);
    read_y_header(src, ysource, limits);
    stream_y(src, ysource, y, limits, classes, sink, out);
  }
  return out;
}

ParsedExamples read_npz(const std::string& path, const ExampleLimits& limits) {
  MemorySink sink;
  return sink.take(stream_npz(path, limits, sink));
}

ExampleSummary stream_npy_pair(const std::string& x_path, const std::string& y_path, const ExampleLimits& limits,
                               ExampleSink& sink) {
  auto open = [](const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) fail(Kind::kUnreadable, path + ": cannot open: " + std::strerror(errno));
    return in;
  };
  ExampleSummary out;
  ClassCounter classes(y_path);
  YHeader y;
  {
    std::ifstream in = open(y_path);
    StreamSource src(in, y_path);
    y = read_y_header(src, y_path, limits);
  }
  {
    std::ifstream in = open(x_path);
    StreamSource src(in, x_path);
    stream_examples(src, x_path, x_path + " and " + y_path, y.n, limits, sink, out);
  }
  {
    std::ifstream in = open(y_path);
    StreamSource src(in, y_path);
    read_y_header(src, y_path, limits);
    stream_y(src, y_path, y, limits, classes, sink, out);
  }
  return out;
}

}  // namespace pstrain
