#include "common/data/shard_sink.h"

#include <algorithm>
#include <cstring>

#include "common/base/crc32c.h"
#include "common/base/error.h"

namespace pstrain {

ShardSink::ShardSink(std::string dir, std::string prefix, ShardLimits limits)
    : dir_(std::move(dir)), prefix_(std::move(prefix)), limits_(limits) {}

void ShardSink::begin(const std::vector<uint32_t>& shape, ParsedExamples::Dtype dtype) {
  ShardLayout layout;
  layout.dtype = dtype;
  layout.example_bytes = dtype_size(dtype);
  for (uint32_t d : shape) layout.example_bytes *= d;
  example_bytes_ = layout.example_bytes;
  writer_.emplace(dir_, prefix_, layout, limits_);
}

void ShardSink::examples(const uint8_t* bytes, size_t n) {
  if (!writer_) throw DataError(dir_ + ": examples before their shape");
  if (example_bytes_ == 0) {  // rows of no values (a table whose features are all text): one per call
    writer_->add_unlabelled(bytes, 0);
    return;
  }
  while (n > 0) {
    if (partial_.empty() && n >= example_bytes_) {
      writer_->add_unlabelled(bytes, example_bytes_);
      bytes += example_bytes_;
      n -= example_bytes_;
      continue;
    }
    const size_t take = std::min<size_t>(n, example_bytes_ - partial_.size());
    partial_.insert(partial_.end(), bytes, bytes + take);
    bytes += take;
    n -= take;
    if (partial_.size() == example_bytes_) {
      writer_->add_unlabelled(partial_.data(), partial_.size());
      partial_.clear();
    }
  }
}

void ShardSink::labels(const int32_t* labels, size_t n) {
  if (labels_.empty() && targets_.empty() && writer_ && writer_->examples() >= streamed_ + n) {
    writer_->add_labels(labels, n);  // after their examples: into the shards now
    streamed_ += n;
    return;
  }
  labels_.insert(labels_.end(), labels, labels + n);
}

void ShardSink::targets(const float* values, size_t n) { targets_.insert(targets_.end(), values, values + n); }

std::vector<ShardInfo> ShardSink::finish(uint32_t target_width) {
  if (!writer_) begin({}, Dtype::kUint8);  // nothing was read: no shards
  if (!partial_.empty()) throw DataError(dir_ + ": the last example is incomplete");
  if (target_width > 0) {
    return writer_->finish_labels(LabelKind::kTargets, target_width, targets_.data(), targets_.size() * sizeof(float));
  }
  if (streamed_ > 0) {  // (labels given before their examples, after some that were not)
    if (!labels_.empty()) writer_->add_labels(labels_.data(), labels_.size());
    return writer_->finish_labels(LabelKind::kClass, 0, nullptr, 0);
  }
  return writer_->finish_labels(LabelKind::kClass, 0, labels_.data(), labels_.size() * sizeof(int32_t));
}

ExampleSummary stream_shards(const std::string& dir, const std::vector<std::string>& files,
                             const std::vector<uint32_t>& shape, Dtype dtype, const ExampleLimits& limits,
                             ExampleSink& sink) {
  ExampleSummary out;
  out.shape = shape;
  out.dtype = dtype;
  uint64_t example_bytes = dtype_size(dtype);
  for (uint32_t d : shape) example_bytes *= d;
  sink.begin(shape, dtype);
  std::vector<uint64_t> counts;
  std::vector<uint8_t> block;
  std::vector<float> targets;
  bool regression = false;
  for (size_t s = 0; s < files.size(); ++s) {
    const ShardFile shard(dir + "/" + files[s]);
    const ShardLayout& layout = shard.layout();
    if (layout.variable || layout.dtype != dtype || layout.example_bytes != example_bytes) {
      throw DataError(shard.path() + ": its examples are not the split's (" + std::string(dtype_name(dtype)) + ", " +
                      std::to_string(example_bytes) + " bytes each)");
    }
    if (layout.labels == LabelKind::kNone) throw DataError(shard.path() + ": its examples have no labels");
    if (s > 0 && regression != (layout.labels == LabelKind::kTargets)) {
      throw DataError(shard.path() + ": its labels are not of the kind of the split's first shard");
    }
    regression = layout.labels == LabelKind::kTargets;
    out.target_width = regression ? layout.target_width : 0;
    // The examples in runs of about 1 MiB, whole examples each.
    const uint64_t per_run = std::max<uint64_t>(1, (uint64_t{1} << 20) / std::max<uint64_t>(example_bytes, 1));
    uint32_t crc = 0;
    for (uint64_t first = 0; first < shard.examples(); first += per_run) {
      const uint64_t count = std::min(per_run, shard.examples() - first);
      block.resize(count * example_bytes);
      shard.read_run(first, count, block.data());
      crc = crc32c_extend(crc, block.data(), block.size());
      sink.examples(block.data(), block.size());
    }
    if (regression) {
      targets.resize(layout.target_width);
      for (uint64_t i = 0; i < shard.examples(); ++i) {
        shard.targets(i, targets.data());
        sink.targets(targets.data(), targets.size());
      }
    } else {
      for (uint64_t i = 0; i < shard.examples(); ++i) {
        const int32_t label = shard.label(i);
        if (label < 0 || static_cast<uint32_t>(label) >= limits.max_classes) {
          throw DataError(shard.path() + ": example " + std::to_string(i) + " has label " + std::to_string(label) +
                          ", not in [0, " + std::to_string(limits.max_classes) + ")");
        }
        if (static_cast<size_t>(label) >= counts.size()) counts.resize(static_cast<size_t>(label) + 1, 0);
        ++counts[static_cast<size_t>(label)];
        sink.labels(&label, 1);
      }
    }
    shard.verify_after_data(crc);
    out.examples += shard.examples();
    if (out.examples > limits.max_examples) {
      throw DataError(shard.path() + ": the split has more than " + std::to_string(limits.max_examples) + " examples");
    }
  }
  if (!regression) {
    counts.resize(std::max<size_t>(counts.size(), 2), 0);
    out.classes = static_cast<uint32_t>(counts.size());
    out.class_counts = std::move(counts);
  }
  return out;
}

}  // namespace pstrain
