// Class folders of text files written as a split of documents: text_folders.h.
#include "common/data/text_folders.h"

#include <algorithm>
#include <cctype>
#include <fstream>
#include <sstream>

#include "common/data/format_parts.h"
#include "common/data/text_profile.h"

namespace pstrain {

using format_detail::fail;
using format_detail::Kind;

bool holds_text_files(const ClassFolders& folders) {
  return !folders.files.empty() && std::all_of(folders.files.begin(), folders.files.end(), [](const auto& f) {
    const std::string& p = f.second->path;
    if (p.size() < 4) return false;
    std::string ext = p.substr(p.size() - 4);
    std::transform(ext.begin(), ext.end(), ext.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    return ext == ".txt";
  });
}

TextColumnWriter::TextColumnWriter(std::string dir, std::string prefix, ShardLimits limits)
    : dir_(std::move(dir)), prefix_(std::move(prefix)), limits_(limits) {}

void TextColumnWriter::cell(size_t text_column, std::string_view text) {
  if (writers_.size() <= text_column) writers_.resize(text_column + 1);
  if (!writers_[text_column]) {
    ShardLayout layout = text_shard_layout();
    layout.labels = LabelKind::kNone;
    writers_[text_column] = std::make_unique<ShardWriter>(dir_, prefix_ + "-text" + std::to_string(text_column), layout, limits_);
  }
  writers_[text_column]->add(text.data(), text.size());
}

std::vector<std::vector<ShardInfo>> TextColumnWriter::finish() {
  std::vector<std::vector<ShardInfo>> out;
  for (auto& w : writers_) out.push_back(w ? w->finish() : std::vector<ShardInfo>{});
  return out;
}

TextColumnsSplit split_text_columns(const std::string& dir,
                                    const std::vector<std::pair<std::string, std::vector<std::string>>>& columns,
                                    const std::vector<bool>& to_second, TextColumnWriter& first, TextColumnWriter& second) {
  TextColumnsSplit out;
  std::vector<uint8_t> cell;
  for (size_t k = 0; k < columns.size(); ++k) {
    TextProfiler profilers[2];
    uint64_t missing[2] = {0, 0};
    uint64_t row = 0;
    for (const std::string& file : columns[k].second) {
      const ShardFile shard(dir + "/" + file);
      shard.verify();
      for (uint64_t i = 0; i < shard.examples(); ++i, ++row) {
        if (row >= to_second.size()) throw DataError(shard.path() + ": more cells than the table has rows");
        const int side = to_second[row] ? 1 : 0;
        shard.read(i, cell);
        const std::string_view text(reinterpret_cast<const char*>(cell.data()), cell.size());
        (side == 1 ? second : first).cell(k, text);
        if (text.empty()) ++missing[side];
        else profilers[side].add(text);
      }
    }
    if (row != to_second.size()) {
      throw DataError(dir + ": text column '" + columns[k].first + "' has " + std::to_string(row) + " cells for " +
                      std::to_string(to_second.size()) + " rows");
    }
    for (int side = 0; side < 2; ++side) {
      ColumnProfile p;
      p.missing = missing[side];
      p.text = profilers[side].finish();
      out.profiles[side].push_back(std::move(p));
    }
  }
  out.shards[0] = first.finish();
  out.shards[1] = second.finish();
  for (auto& side : out.shards) side.resize(columns.size());
  return out;
}

std::array<TextProfile, 2> split_text_documents(const std::string& dir, const std::vector<std::string>& files,
                                                const std::vector<bool>& to_second, ShardWriter& first, ShardWriter& second) {
  TextProfiler profilers[2];
  std::vector<uint8_t> document;
  uint64_t at = 0;
  for (const std::string& file : files) {
    const ShardFile shard(dir + "/" + file);
    if (!(shard.layout() == text_shard_layout())) throw DataError(shard.path() + ": not a shard of text documents with class labels");
    shard.verify();
    for (uint64_t i = 0; i < shard.examples(); ++i, ++at) {
      if (at >= to_second.size()) throw DataError(shard.path() + ": more documents than the split was planned for");
      const int side = to_second[at] ? 1 : 0;
      shard.read(i, document);
      (side == 1 ? second : first).add(document.data(), document.size(), shard.label(i));
      profilers[side].add(std::string_view(reinterpret_cast<const char*>(document.data()), document.size()));
    }
  }
  if (at != to_second.size()) {
    throw DataError(dir + ": " + std::to_string(at) + " documents, but the split was planned for " + std::to_string(to_second.size()));
  }
  return {profilers[0].finish(), profilers[1].finish()};
}

ShardLayout text_shard_layout() {
  ShardLayout layout;
  layout.variable = true;
  layout.dtype = Dtype::kUint8;
  layout.labels = LabelKind::kClass;
  return layout;
}

ExampleSummary stream_text_folders(Archive& archive, const std::string& source, const ClassFolders& folders,
                                   const TextFolderOptions& options, ShardWriter& out) {
  TextProfiler profiler;
  ExampleSummary summary;
  summary.dtype = Dtype::kUint8;
  uint64_t total = 0;
  for (const auto& [label, entry] : folders.files) {
    const std::string name = source + ":" + entry->path;
    if (entry->size > options.max_file_bytes) {
      fail(Kind::kTooLarge, name + ": " + std::to_string(entry->size) + " bytes, over the cap of " +
                                std::to_string(options.max_file_bytes) + " bytes for one document");
    }
    const std::vector<uint8_t> bytes = archive.read(*entry, options.max_file_bytes);
    const std::string_view text(reinterpret_cast<const char*>(bytes.data()), bytes.size());
    if (const std::optional<Utf8Error> e = utf8_error(text)) {
      fail(Kind::kBadEncoding,
           name + ": line " + std::to_string(e->line) + ", byte " + std::to_string(e->column) +
               ": not UTF-8 (save the file as UTF-8)",
           e->line);
    }
    total += bytes.size();
    if (total > options.limits.max_bytes) {
      fail(Kind::kTooLarge, source + ": the documents exceed the cap of " + std::to_string(options.limits.max_bytes) + " bytes");
    }
    profiler.add(text);
    out.add(bytes.data(), bytes.size(), label);
    ++summary.examples;
  }
  summary.classes = static_cast<uint32_t>(folders.class_names.size());
  summary.class_counts = folders.class_counts;
  summary.text = profiler.finish();
  return summary;
}

ExampleSummary stream_text_shards(const std::string& dir, const std::vector<std::string>& files,
                                  const std::string& profile, const ExampleLimits& limits, ExampleSink& sink) {
  ExampleSummary out;
  out.dtype = Dtype::kUint8;
  sink.begin(out.shape, out.dtype);
  std::vector<uint64_t> counts;
  for (const std::string& file : files) {
    const ShardFile shard(dir + "/" + file);
    if (!(shard.layout() == text_shard_layout())) {
      throw DataError(shard.path() + ": not a shard of text documents with class labels");
    }
    shard.verify();
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
    out.examples += shard.examples();
    if (out.examples > limits.max_examples) {
      throw DataError(shard.path() + ": the split has more than " + std::to_string(limits.max_examples) + " examples");
    }
  }
  // (A test split may hold fewer classes than the dataset: its counts are padded, as stream_shards'.)
  counts.resize(std::max<size_t>(counts.size(), 2), 0);
  out.classes = static_cast<uint32_t>(counts.size());
  out.class_counts = std::move(counts);
  const std::string path = dir + "/" + profile;
  std::ifstream in(path, std::ios::binary);
  if (!in) throw DataError(path + ": cannot open");
  std::stringstream text;
  text << in.rdbuf();
  out.text = text_profile_from_json(text.str(), path);
  if (out.text->documents != out.examples) {
    throw DataError(path + ": profiles " + std::to_string(out.text->documents) + " documents but the shards hold " +
                    std::to_string(out.examples));
  }
  return out;
}

}  // namespace pstrain
