// What the dataset catalog's files share (dataset_catalog.cc: records, indexing, deletes;
// dataset_uploads.cc: uploads and splits): the catalog's stored record form, file facts, and the
// example sinks of a split. Internal to the catalog.
//
// Thread rules: pure functions and single-owner sinks (the catalog's thread).
#pragma once

#include <cstring>
#include <boost/json.hpp>

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "common/data/dataset_formats.h"
#include "common/data/dataset_manifest.h"
#include "common/data/shard_sink.h"
#include "coordinator/datasets/dataset_catalog.h"

namespace pstrain::catalog_detail {
namespace fs = std::filesystem;
namespace json = boost::json;

inline constexpr const char* kStagingDir = ".uploads";
inline const std::string kKeyPrefix = "dataset/";

// Only counts: the checks of a parse without keeping what it read.
class CountingSink final : public ExampleSink {
 public:
  void begin(const std::vector<uint32_t>&, ParsedExamples::Dtype) override {}
  void examples(const uint8_t*, size_t) override {}
  void labels(const int32_t*, size_t) override {}
  void targets(const float*, size_t) override {}
};

// Keeps the labels only, and counts regression targets (the first pass of a split).
class LabelSink final : public ExampleSink {
 public:
  void begin(const std::vector<uint32_t>&, ParsedExamples::Dtype) override {}
  void examples(const uint8_t*, size_t) override {}
  void labels(const int32_t* l, size_t n) override { labels_.insert(labels_.end(), l, l + n); }
  void targets(const float*, size_t n) override { target_values_ += n; }
  std::vector<int32_t> labels_;
  size_t target_values_ = 0;
};

// Passes everything on to `next` and profiles the examples as table rows (float32, one value per
// stored column). Takes whole examples per call, as RoutingSink gives them.
class ProfilingSink final : public ExampleSink {
 public:
  ProfilingSink(ExampleSink& next, const TableSchema& schema) : next_(next), profiler_(schema) {}
  void begin(const std::vector<uint32_t>& shape, ParsedExamples::Dtype dtype) override { next_.begin(shape, dtype); }
  void examples(const uint8_t* bytes, size_t n) override {
    row_.resize(n / sizeof(float));
    if (n > 0) std::memcpy(row_.data(), bytes, row_.size() * sizeof(float));
    profiler_.add(row_.data());
    next_.examples(bytes, n);
  }
  void labels(const int32_t* l, size_t n) override { next_.labels(l, n); }
  void targets(const float* t, size_t n) override { next_.targets(t, n); }
  TableSchema finish() const { return profiler_.finish(); }

 private:
  ExampleSink& next_;
  TableProfiler profiler_;
  std::vector<float> row_;
};

// Sends whole examples to one of two sinks by a per-example choice (the second pass of a split).
class RoutingSink final : public ExampleSink {
 public:
  RoutingSink(const std::vector<bool>& to_second, ExampleSink& first, ExampleSink& second)
      : to_second_(to_second), first_(first), second_(second) {}
  void begin(const std::vector<uint32_t>& shape, ParsedExamples::Dtype dtype) override {
    example_bytes_ = ParsedExamples::dtype_size(dtype);
    for (uint32_t d : shape) example_bytes_ *= d;
    first_.begin(shape, dtype);
    second_.begin(shape, dtype);
  }
  void examples(const uint8_t* bytes, size_t n) override {
    while (n > 0) {
      const size_t take = std::min(n, example_bytes_ - current_.size());
      current_.insert(current_.end(), bytes, bytes + take);
      bytes += take;
      n -= take;
      if (current_.size() == example_bytes_) {
        (to_second_[example_] ? second_ : first_).examples(current_.data(), current_.size());
        current_.clear();
        ++example_;
      }
    }
  }
  void labels(const int32_t* l, size_t n) override {
    for (size_t i = 0; i < n; ++i, ++label_) {
      ExampleSink& side = to_second_[label_] ? second_ : first_;
      if (example_bytes_ == 0) side.examples(nullptr, 0);  // rows of no values: one per label (shard_sink.h)
      side.labels(l + i, 1);
    }
  }
  // Regression targets, `width` per example (set before the first call).
  void set_target_width(size_t width) { target_width_ = width; }
  void targets(const float* t, size_t n) override {
    for (size_t i = 0; i < n; ++i, ++target_) {
      ExampleSink& side = to_second_[target_ / target_width_] ? second_ : first_;
      if (example_bytes_ == 0 && target_ % target_width_ == 0) side.examples(nullptr, 0);
      side.targets(t + i, 1);
    }
  }

 private:
  const std::vector<bool>& to_second_;
  ExampleSink& first_;
  ExampleSink& second_;
  size_t example_bytes_ = 0;
  std::vector<uint8_t> current_;
  size_t example_ = 0, label_ = 0, target_ = 0, target_width_ = 1;
};

CatalogError format_error(const DatasetFormatError& e);
std::string replace_all(std::string text, const std::string& from, const std::string& to);
// An upload as its messages name it: "train.csv", "train.npz", "train/images".
std::string upload_name(const DatasetCatalog::Upload& u);
int64_t mtime_ms(const fs::path& path);
// A file's path shown to users: relative to the staging or data directory, never the server's layout.
std::string strip_dir(std::string message, const std::string& dir);
// Names, sizes and mtimes of the files (and the manifest): equal fingerprints mean the files did
// not change, so a stored record still describes them.
std::string fingerprint(const std::vector<std::string>& paths);
json::object dataset_to_json(const DatasetRecord& r);
std::optional<DatasetRecord> dataset_from_json(const std::string& text);
DatasetFileInfo file_info(const fs::path& path);
// The split's statistics from a summary and its files.
DatasetSplitInfo split_info(const ExampleSummary& summary, const fs::path& dir, const std::vector<std::string>& files);
// Every split reports a count for each of the dataset's classes.
void pad_counts(DatasetRecord& r);
// A split of the dataset store's shards (what the catalog writes), with its table file if any.
ManifestSplit shards_split(const std::vector<ShardInfo>& shards, const ExampleSummary& summary,
                           const std::string& table = "");
// A text split's manifest entry: its shards and its profile file.
ManifestSplit text_split(const std::vector<ShardInfo>& shards, const std::string& profile);
// Writes `text` to `path` (a staging file: made durable by the directory's rename, as the shards are).
void write_text_file(const std::string& path, const std::string& text);

}  // namespace pstrain::catalog_detail
