// Class-folder text datasets, as Keras' text_dataset_from_directory reads them: the class folders
// of image_folders.h (same rules: root, hidden files, sorted classes, order) holding `.txt` files,
// each file one document kept as its UTF-8 bytes (no decoding, no line splitting: a file is an
// example, as Keras makes it). Stored as variable-size examples in the dataset store
// (shard_file.h), profiled as they are written (text_profile.h).
//
// Thread rules: pure functions of their arguments (the writer is the caller's).
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string_view>
#include <vector>
#include <string>

#include "common/data/archive.h"
#include "common/data/dataset_formats.h"
#include "common/data/image_folders.h"
#include "common/data/shard_file.h"

namespace pstrain {

// True when every file of `folders` is named `*.txt` (any case): a text dataset. (Otherwise the
// folders are read as images, and a file that is neither is an error naming it.)
bool holds_text_files(const ClassFolders& folders);

struct TextFolderOptions {
  ExampleLimits limits;                          // max_bytes: the documents' bytes together
  uint64_t max_file_bytes = uint64_t{16} << 20;  // one document
};

// Writes every file of `folders` (found in `archive` by find_class_folders) to `out` (a writer
// of variable-size examples with class labels) as one example, labelled with its class, in the
// folders' order. A file that is not UTF-8 is a DatasetFormatError (kBadEncoding) naming the file,
// the line and the byte column; one over max_file_bytes, or all of them over limits.max_bytes,
// kTooLarge. The summary's `text` is the documents' profile; its shape is {} (one string).
ExampleSummary stream_text_folders(Archive& archive, const std::string& source, const ClassFolders& folders,
                                   const TextFolderOptions& options, ShardWriter& out);

// A table's text columns (dataset_formats.h TextCellSink) written as shards of documents, one
// set per column: `<dir>/<prefix>-text<k>-NNNNN.shard` for text column k, row i's cell as
// example i (variable-size UTF-8, no labels: the table's shards have them).
class TextColumnWriter final : public TextCellSink {
 public:
  TextColumnWriter(std::string dir, std::string prefix, ShardLimits limits);
  void cell(size_t text_column, std::string_view text) override;
  // The shards of each text column, in column order.
  std::vector<std::vector<ShardInfo>> finish();

 private:
  std::string dir_, prefix_;
  ShardLimits limits_;
  std::vector<std::unique_ptr<ShardWriter>> writers_;
};

// A table's text columns split row by row (POST /v1/datasets/{name}/split): row i's cells go to
// side 1 when to_second[i], else side 0, each side written by its own TextColumnWriter and
// profiled (an empty cell counts as missing, as the parser counts it).
struct TextColumnsSplit {
  std::vector<std::vector<ShardInfo>> shards[2];  // [side][text column]
  std::vector<ColumnProfile> profiles[2];          // [side][text column]
};
TextColumnsSplit split_text_columns(const std::string& dir,
                                    const std::vector<std::pair<std::string, std::vector<std::string>>>& columns,
                                    const std::vector<bool>& to_second, TextColumnWriter& first, TextColumnWriter& second);

// A text split's documents (the shards `files` of `dir`, text_shard_layout) split one by one
// (POST /v1/datasets/{name}/split): document i goes to `second` when to_second[i], else to
// `first`, with its label, in order; each side profiled ([0]: first's, [1]: second's). Throws
// DataError naming the shard when the shards and to_second differ in length.
std::array<TextProfile, 2> split_text_documents(const std::string& dir, const std::vector<std::string>& files,
                                                const std::vector<bool>& to_second, ShardWriter& first, ShardWriter& second);

// The layout of a text split's shards: variable-size UTF-8 examples with class labels.
ShardLayout text_shard_layout();

// Reads a text split's shards `files` of `dir` (in order) for what indexing needs: each shard is
// verified whole (CRC-32C) and its labels checked against `limits` and given to `sink` (begin({})
// first; no examples: documents are not arrays). The summary's profile is `profile` (the split's
// profile file, text_profile.h). Throws DataError naming the file.
ExampleSummary stream_text_shards(const std::string& dir, const std::vector<std::string>& files,
                                  const std::string& profile, const ExampleLimits& limits, ExampleSink& sink);

}  // namespace pstrain
