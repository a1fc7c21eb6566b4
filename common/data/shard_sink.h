// Datasets in the store's form (shard_file.h) through the parsers' interface (ExampleSink): a
// sink that writes a split's shards as a parser reads it, and the reverse, a split's shards
// streamed to any sink (what loading, indexing and splitting a stored dataset do).
//
// Thread rules: single-owner values; the functions are reentrant.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/data/dataset_formats.h"
#include "common/data/shard_file.h"

namespace pstrain {

// Writes `<dir>/<prefix>-NNNNN.shard` files: the examples as they come (whole ones; a parser may
// give parts), and the class labels that follow their examples (every parser but one that gives
// labels first) written into the shards as they come (ShardWriter::add_labels: at most one
// shard's labels wait); labels given before their examples and regression targets are kept (4
// bytes a value) and sealed into the shards by finish(). Examples of no bytes (shape {0}: a table
// whose features are all text columns) come one per examples() call. Throws DataError on an I/O error.
class ShardSink final : public ExampleSink {
 public:
  ShardSink(std::string dir, std::string prefix, ShardLimits limits = {});

  void begin(const std::vector<uint32_t>& shape, ParsedExamples::Dtype dtype) override;
  void examples(const uint8_t* bytes, size_t n) override;
  void labels(const int32_t* labels, size_t n) override;
  void targets(const float* values, size_t n) override;
  // The shards, once every example has its label (or, with `target_width`, its targets).
  std::vector<ShardInfo> finish(uint32_t target_width = 0);

 private:
  std::string dir_, prefix_;
  ShardLimits limits_;
  std::optional<ShardWriter> writer_;
  uint64_t example_bytes_ = 0;
  std::vector<uint8_t> partial_;  // an example given in parts
  std::vector<int32_t> labels_;  // labels given before their examples
  uint64_t streamed_ = 0;         // labels handed to the writer as they came
  std::vector<float> targets_;
};

// Streams the shards `files` of `dir` (in order) to `sink`: begin(shape, their dtype), then each
// shard's examples and its labels or targets, reading each shard once from start to end and
// checking its CRC-32C on the way. Labels are checked against `limits` (max_classes) and counted;
// the summary is what a parser's would be. Throws DataError naming the file.
ExampleSummary stream_shards(const std::string& dir, const std::vector<std::string>& files,
                             const std::vector<uint32_t>& shape, Dtype dtype, const ExampleLimits& limits,
                             ExampleSink& sink);

}  // namespace pstrain
