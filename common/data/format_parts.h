// What the dataset format parsers (dataset_formats.cc: CSV; array_formats.cc: NPY, NPZ;
// idx_format.cc: IDX)
// share: their one way to fail, the class counter and the in-memory sink. Internal to
// common/data: not for other libraries.
//
// Thread rules: pure functions and single-owner objects.
#pragma once

#include <algorithm>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "common/data/dataset_formats.h"

namespace pstrain::format_detail {

using Kind = DatasetFormatError::Kind;

[[noreturn]] inline void fail(Kind kind, const std::string& message, uint64_t line = 0, std::string column = "") {
  throw DatasetFormatError(kind, message, line, std::move(column));
}

// Counts checked labels (each in [0, max_classes)) per class; the class count is max label + 1,
// at least 2.
class ClassCounter {
 public:
  explicit ClassCounter(std::string source) : source_(std::move(source)) {}
  void add(int32_t label) {
    const auto l = static_cast<size_t>(label);
    if (l >= counts_.size()) counts_.resize(l + 1, 0);
    ++counts_[l];
  }
  void finish(ExampleSummary& summary) {
    if (counts_.size() < 2) {
      fail(Kind::kTooFewClasses, source_ + ": every label is 0; a dataset needs at least 2 classes");
    }
    summary.classes = static_cast<uint32_t>(counts_.size());
    summary.class_counts = std::move(counts_);
  }

 private:
  std::string source_;
  std::vector<uint64_t> counts_;
};

// Collects what a stream_* function parses into a ParsedExamples.
class MemorySink final : public ExampleSink {
 public:
  void begin(const std::vector<uint32_t>&, ParsedExamples::Dtype) override {}
  void examples(const uint8_t* bytes, size_t n) override { out_.bytes.insert(out_.bytes.end(), bytes, bytes + n); }
  void labels(const int32_t* labels, size_t n) override { out_.labels.insert(out_.labels.end(), labels, labels + n); }
  void targets(const float* values, size_t n) override { out_.targets.insert(out_.targets.end(), values, values + n); }
  ParsedExamples take(const ExampleSummary& summary) {
    out_.shape = summary.shape;
    out_.dtype = summary.dtype;
    out_.classes = summary.classes;
    out_.target_width = summary.target_width;
    out_.table = summary.table;
    return std::move(out_);
  }

 private:
  ParsedExamples out_;
};

// Checks one label value (already known to be an integer) against the cap.
inline void check_label(int64_t value, const ExampleLimits& limits, const std::string& place, uint64_t line = 0,
                 const std::string& column = "") {
  // Labels are stored as int32: no cap lets them past that.
  const int64_t cap = std::min<int64_t>(limits.max_classes, std::numeric_limits<int32_t>::max());
  if (value < 0 || value >= cap) {
    fail(Kind::kBadLabel,
         place + ": label " + std::to_string(value) + " is not in [0, " +
             std::to_string(limits.max_classes) + ")",
         line, column);
  }
}

// Where array bytes come from (array_formats.cc: an istream or a zip entry; idx_format.cc: a
// gzip'd or plain file).
class ByteSource {
 public:
  virtual ~ByteSource() = default;
  // Reads up to n bytes; returns how many (0 at the end). Throws on a read error.
  virtual size_t read(void* data, size_t n) = 0;
};

// Reads exactly n bytes; fewer is kTruncated with `what` in the message.
void read_exactly(ByteSource& src, void* data, size_t n, const std::string& source, const std::string& what);
// After the last data byte: nothing may follow (kTrailingData).
void expect_end(ByteSource& src, const std::string& source, uint64_t bytes);

// A shape as NumPy writes it: "(3, 28, 28)", "(5,)".
inline std::string shape_text(const std::vector<uint64_t>& shape) {
  std::string s = "(";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + (shape.size() == 1 ? ",)" : ")");
}

}  // namespace pstrain::format_detail
