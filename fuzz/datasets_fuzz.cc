// Fuzz target: the dataset parsers (common/data/dataset_formats.h, common/data/idx.h), with the limits an
// upload gets (ExampleLimits' defaults: what the dataset catalog uses).
//
// The first byte picks the parser, the rest is the file:
//   0 CSV (parse_csv from an istringstream)   1 NPY (read_npy from an istringstream)
//   2 NPZ (read_npz, from a temp file)        3 IDX (read_idx, rank 1 and 3, from a temp file)
//   4 an IDX pair (stream_idx): the next 2 bytes are the labels file's length, then the labels
//     file, then the images file
//   5 JSON Lines (parse_jsonl from an istringstream)
// Only DatasetFormatError / DataError are expected answers. What parses must be consistent: as
// many labels as examples, each below `classes`, and bytes for exactly that many examples.
// run.sh gives this target -malloc_limit_mb=256: no parser may allocate for a size its header
// claims before the bytes are there.
#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>

#include "common/data/dataset_formats.h"
#include "common/base/error.h"
#include "common/data/idx.h"
#include "fuzz/fuzz_check.h"

namespace {

using pstrain::fuzz::broken;
using pstrain::fuzz::check;

// A temp file of this process's (libFuzzer may run several jobs in one directory).
std::string temp_path(const char* tag) {
  const char* dir = std::getenv("TMPDIR");
  return std::string(dir != nullptr ? dir : "/tmp") + "/pstrain-fuzz-" + std::to_string(getpid()) + "-" + tag;
}

void write_file(const std::string& path, const uint8_t* data, size_t size) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  if (!out) broken("cannot write the temp file");
}

void check_parsed(const pstrain::ParsedExamples& p) {
  check(p.size() > 0, "parsed no examples");
  if (p.target_width > 0) {  // a regression dataset: finite float targets, no labels or classes
    check(p.labels.empty() && p.classes == 0, "labels beside regression targets");
    check(p.targets.size() == p.size() * p.target_width, "targets do not match the examples");
    for (float t : p.targets) check(std::isfinite(t), "a target that is not finite");
  } else {
    check(p.classes >= 2, "fewer than 2 classes");
  }
  for (int32_t label : p.labels) check(label >= 0 && static_cast<uint32_t>(label) < p.classes, "label out of range");
  check(p.bytes.size() == p.size() * p.example_values() * p.dtype_size(p.dtype), "bytes do not match the shape");
}

// A parsed table: one stored value per stored column, each a valid code (categorical), 0 or 1
// (boolean) or NaN (missing); its JSON form reads back to the same text.
void check_table(const pstrain::ParsedExamples& p) {
  check(p.table.has_value(), "a CSV without its table");
  const auto stored = p.table->stored_columns();
  check(p.shape.size() == 1 && p.shape[0] == stored.size(), "shape does not match the stored columns");
  for (const pstrain::TableColumn* c : p.table->text_columns()) {
    check(c->profile.text.has_value() && c->profile.text->documents + c->profile.missing == p.table->rows, "a text column's profile");
  }
  if (stored.empty()) {  // only text columns: rows of no values
    check(p.bytes.empty() && !p.table->text_columns().empty(), "rows of no values without text columns");
    return;
  }
  std::vector<float> v(p.bytes.size() / sizeof(float));
  std::memcpy(v.data(), p.bytes.data(), v.size() * sizeof(float));
  for (size_t i = 0; i < v.size(); ++i) {
    const pstrain::TableColumn& c = *stored[i % stored.size()];
    if (std::isnan(v[i])) continue;
    if (c.type == pstrain::ColumnType::kCategorical) {
      check(v[i] >= 0 && v[i] < static_cast<float>(c.categories.size()) && v[i] == std::floor(v[i]), "a bad category code");
    } else if (c.type == pstrain::ColumnType::kBoolean) {
      check(v[i] == 0 || v[i] == 1, "a boolean that is not 0 or 1");
    } else {
      check(std::isfinite(v[i]), "a numeric value that is not finite");
    }
  }
  // (Boost 1.81 parses doubles to within an ulp, not always exactly: the moments are compared so.)
  const pstrain::TableSchema back = pstrain::table_from_json(pstrain::table_to_json(*p.table), "fuzz");
  check(back.class_names == p.table->class_names && back.label == p.table->label && back.rows == p.table->rows &&
            back.columns.size() == p.table->columns.size(),
        "the table's JSON does not read back");
  auto close = [](double a, double b) { return (std::isnan(a) && std::isnan(b)) || std::abs(a - b) <= 1e-12 * std::abs(a); };
  for (size_t i = 0; i < back.columns.size(); ++i) {
    const pstrain::TableColumn &a = p.table->columns[i], &b = back.columns[i];
    check(a.name == b.name && a.type == b.type && a.categories == b.categories && a.profile.missing == b.profile.missing &&
              a.profile.top == b.profile.top && close(a.profile.min, b.profile.min) && close(a.profile.max, b.profile.max) &&
              close(a.profile.mean, b.profile.mean) && close(a.profile.std, b.profile.std),
          "a column's JSON does not read back");
  }
}

// Counts what a stream_* parser gives, in the order the ExampleSink contract allows.
class CheckingSink final : public pstrain::ExampleSink {
 public:
  void begin(const std::vector<uint32_t>& shape, pstrain::ParsedExamples::Dtype dtype) override {
    check(!begun_, "begin() twice");
    begun_ = true;
    per_example_ = pstrain::dtype_size(dtype);
    for (uint32_t d : shape) per_example_ *= d;
  }
  void examples(const uint8_t*, size_t n) override {
    check(begun_, "examples() before begin()");
    bytes_ += n;
  }
  void labels(const int32_t*, size_t n) override { labels_ += n; }
  void targets(const float* t, size_t n) override {
    for (size_t i = 0; i < n; ++i) check(std::isfinite(t[i]), "a target that is not finite");
    targets_ += n;
  }
  void finish(const pstrain::ExampleSummary& s) const {
    check(begun_, "no begin()");
    check(bytes_ == s.examples * per_example_, "example bytes differ from the shape");
    if (s.target_width > 0) {  // a regression dataset: targets, no labels or classes
      check(labels_ == 0 && s.classes == 0, "labels beside regression targets");
      check(targets_ == s.examples * s.target_width, "target count differs from examples x width");
      return;
    }
    check(targets_ == 0, "targets beside class labels");
    check(labels_ == s.examples, "label count differs from the example count");
    check(s.class_counts.size() == s.classes && s.classes >= 2, "class counts");
    uint64_t total = 0;
    for (uint64_t c : s.class_counts) total += c;
    check(total == s.examples, "class counts do not add up to the examples");
  }

 private:
  bool begun_ = false;
  uint64_t per_example_ = 0, bytes_ = 0, labels_ = 0, targets_ = 0;
};

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  // The temp files go when the run ends (libFuzzer exits through exit() unless a crash is found).
  std::atexit([] {
    for (const char* tag : {"x.npz", "x.idx", "labels.idx", "images.idx"}) std::remove(temp_path(tag).c_str());
  });
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const uint8_t format = data[0] % 6;
  ++data;
  --size;
  const std::string text(reinterpret_cast<const char*>(data), size);
  try {
    switch (format) {
      case 0: {
        std::istringstream in(text);
        const pstrain::ParsedExamples p = pstrain::parse_csv(in, "fuzz.csv");
        check_parsed(p);
        check_table(p);
        break;
      }
      case 1: {
        std::istringstream in(text);
        const pstrain::NpyArray a = pstrain::read_npy(in, "fuzz.npy");
        uint64_t values = 1;
        for (uint64_t d : a.shape) values *= d;
        const uint64_t width = a.dtype == pstrain::NpyArray::Dtype::kUint8   ? 1
                               : a.dtype == pstrain::NpyArray::Dtype::kInt64 ? 8
                                                                             : 4;
        check(a.bytes.size() == values * width, "npy bytes do not match the shape");
        break;
      }
      case 2: {
        const std::string path = temp_path("x.npz");
        write_file(path, data, size);
        check_parsed(pstrain::read_npz(path));
        break;
      }
      case 3: {
        const std::string path = temp_path("x.idx");
        write_file(path, data, size);
        for (int rank : {1, 3}) {
          try {
            const pstrain::IdxArray a = pstrain::read_idx(path, rank);
            uint64_t values = 1;
            for (uint32_t d : a.dims) values *= d;
            check(a.dims.size() == static_cast<size_t>(rank) && a.values.size() == values, "idx values vs dims");
          } catch (const pstrain::DataError&) {
          }
        }
        break;
      }
      case 4: {
        if (size < 2) return 0;
        const size_t labels_len = std::min<size_t>(size - 2, data[0] | (size_t{data[1]} << 8));
        const std::string labels = temp_path("labels.idx"), images = temp_path("images.idx");
        write_file(labels, data + 2, labels_len);
        write_file(images, data + 2 + labels_len, size - 2 - labels_len);
        CheckingSink sink;
        sink.finish(pstrain::stream_idx(images, labels, {}, sink));
        break;
      }
      case 5: {
        std::istringstream in(text);
        const pstrain::ParsedExamples p = pstrain::parse_jsonl(in, "fuzz.jsonl");
        check_parsed(p);
        check_table(p);
        break;
      }
    }
  } catch (const pstrain::DataError&) {
  }
  return 0;
}
