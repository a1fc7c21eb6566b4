// Dataset directories: a directory `<data dir>/<name>/` holding `dataset.json` and the files it
// names is a dataset called <name>. The dataset catalog stores uploads this way, and a user can
// drop such a directory into the data directory (or copy one between clusters).
//
// dataset.json:
//   {
//     "train": <files>,            required
//     "test": <files>,             optional (POST /v1/datasets/{name}/split can make one)
//     "num_classes": 10,           optional: else max label + 1 over the splits
//     "class_names": ["cat", ...], optional: class i's name (a class-folder upload's folders)
//     "source": "directory",       optional: "upload" for what the catalog wrote
//     "created_ms": 1700000000000  optional: Unix milliseconds
//   }
// where <files> is one of (paths relative to the directory, no "/" or ".."):
//   {"x": "train-x.npy", "y": "train-y.npy"}   an .npy pair (x: |u1 or <f4, y: integers)
//     optionally with "table": "train-table.json", the columns of a table stored as x
//     (table_schema.h: types, categories, class names, profile), as the catalog stores a CSV
//   {"npz": "train.npz"}                        an .npz with arrays x and y
//   {"csv": "train.csv", "label": "label"}      CSV with a header; "label" names the label column
//   {"jsonl": "train.jsonl", "label": "label"}  JSON Lines, one object per line
//   {"images": "train-images-idx3-ubyte.gz", "labels": "train-labels-idx1-ubyte.gz"}   IDX pair
//   {"folders": "train", "image_size": [64, 64], "color_mode": "rgb"}
//                                               a folder of class folders of PNG and JPEG images
//     (image_folders.h; image_size and color_mode optional, as an upload's), decoded whenever the
//     split is read: the classes are "class_names" when given, else the train split's folders
//     (class folders whose files are all *.txt hold documents instead: text_folders.h; they are
//     converted into a {"text": ...} split's files, converted_split.h)
//   {"shards": ["train-00000.shard", ...], "shape": [28, 28, 1], "dtype": "uint8"}
//                                               the dataset store's shard files (shard_file.h),
//     optionally with "table" as for an .npy pair, and "text_columns": [{"column": "review",
//     "shards": [...]}], a table's text columns as shards of documents (text_folders.h)
//   {"text": ["train-00000.shard", ...], "profile": "train-text.json"}
//                                               documents (a class-folder upload of .txt files,
//     text_folders.h): shards of variable-size UTF-8 examples and the split's profile
//     (text_profile.h); listed, profiled and counted, not yet trained on (no layer reads text)
// Every format follows common/data/dataset_formats.h's rules (uint8 examples are scaled by 1/255 when
// trained on; float32 ones are used as they are).
//
// Thread rules: pure functions; any thread.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/data/dataset.h"
#include "common/data/dataset_formats.h"
#include "common/data/image_decode.h"

namespace pstrain {

inline constexpr const char* kManifestFile = "dataset.json";

// The dataset name rule: [a-z0-9][a-z0-9._-]{0,63} (a directory name, a URL path segment and a
// RocksDB key, with nothing to escape).
bool is_valid_dataset_name(const std::string& name);

struct ManifestSplit {
  enum class Format { kNpy, kNpz, kCsv, kIdx, kJsonl, kShards, kFolders, kText };
  Format format = Format::kNpy;
  std::string x, y;             // kNpy
  std::string table;            // kNpy, kShards, optional: the table's schema and profile (table_schema.h)
  std::vector<std::string> shards;  // kShards, kText: in order
  std::string profile;              // kText: the documents' profile (text_profile.h)
  // kShards of a table: each text column's shards (column name, files in order).
  std::vector<std::pair<std::string, std::vector<std::string>>> text_columns;
  std::vector<uint32_t> shape;      // kShards: one example's
  Dtype dtype = Dtype::kUint8;      // kShards
  std::string npz;              // kNpz
  std::string csv, label = "label";  // kCsv (label: also kJsonl's)
  std::string jsonl;                 // kJsonl
  std::string images, labels;   // kIdx
  std::string folders;          // kFolders: the folder of class folders
  uint32_t image_height = 0, image_width = 0;  // kFolders: image_size (0: the files' own size)
  ColorMode color_mode = ColorMode::kRgb;      // kFolders
  std::vector<std::string> class_names;        // kFolders: the dataset's classes (read_manifest sets them)
  // The file names, in a fixed order (a kFolders split's folder is not listed: its files are
  // read whole whenever the split is).
  std::vector<std::string> files() const;
};

struct DatasetManifest {
  std::map<std::string, ManifestSplit> splits;  // "train" (required), "test"
  std::optional<uint32_t> num_classes;
  std::vector<std::string> class_names;  // empty: numbered classes (or a table's own names)
  std::string source = "directory";
  int64_t created_ms = 0;
};

// Reads `<dir>/dataset.json`. Throws DataError naming the file and the field at fault.
DatasetManifest read_manifest(const std::string& dir);
// The JSON text of a manifest (what write_manifest writes).
std::string manifest_to_json(const DatasetManifest& manifest);
// Writes `<dir>/dataset.json` atomically (a temporary file, fsync'd, then renamed over it).
void write_manifest(const std::string& dir, const DatasetManifest& manifest);

// Streams one split of a dataset directory to `sink`. Throws DatasetFormatError for defects.
// A CSV or JSON Lines split other than the train split is read with the train split's columns,
// types and class names (`reference`, the train split's table; null: none), as an upload is.
ExampleSummary stream_manifest_split(const std::string& dir, const ManifestSplit& split, const ExampleLimits& limits,
                                     ExampleSink& sink, const TableSchema* reference = nullptr);
// The table of a manifest's train split when it is a text table (CSV or JSON Lines: read whole,
// nothing kept but the schema); null otherwise.
std::shared_ptr<const TableSchema> text_train_table(const std::string& dir, const DatasetManifest& manifest,
                                                    const ExampleLimits& limits);

// Loads a split of a dataset directory into memory, as a Split of `num_classes` classes (0: the
// manifest's num_classes, else the split's max label + 1). Throws DataError.
Split load_directory_split(const std::string& dir, const std::string& name, SplitKind kind, uint32_t num_classes = 0);

// A dataset by name, for processes that read the data directory themselves (pstrain-train): a
// built-in name (the dataset table), else the dataset directory `<data_dir>/<name>`.
Split load_any_split(const std::string& data_dir, const std::string& name, SplitKind kind);

}  // namespace pstrain
