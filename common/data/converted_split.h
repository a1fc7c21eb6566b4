// A dropped-in dataset directory's split of arrays (IDX, NPY, NPZ, class folders of images), and
// a built-in dataset's IDX files, converted once into the dataset store's shards beside its files, so that loading it holds its
// labels only (stored_examples.h) and workers read its examples themselves, as for an upload
// (docs/DESIGN-NOTES.md "Dropped-in splits as shards"). Class folders of text files
// (text_folders.h) convert into shards of documents and their profile, as an upload of them is
// stored.
//
// The shards live in `<dir>/.pstrain-shards/<split>-<key>/`, `key` a SHA-256 prefix of the
// split's manifest entry and of every source file's path, size and mtime: a changed file or
// manifest makes a new conversion (older ones for the split are removed). A conversion is
// written to a temporary directory and renamed into place, so a reader sees a whole one or none,
// and two processes converting at once both end with the same (the first rename wins).
//
// Thread rules: free functions; any thread (the coordinator's loading thread, pstrain-train).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "common/data/dataset_manifest.h"

namespace pstrain {

struct ConvertedSplit {
  std::string dir;                  // the shards' directory
  std::vector<std::string> shards;  // file names in `dir`, in order
  std::vector<uint32_t> shape;
  Dtype dtype = Dtype::kUint8;
  std::string profile;  // documents (text folders): the profile's file name in `dir`; empty: arrays

  bool text() const { return !profile.empty(); }
  // As a split of the dataset directory it was converted from (its files' names relative to it):
  // kShards, or kText for documents.
  ManifestSplit as_split_of(const std::string& dataset_dir) const;
};

// Whether `split` is converted (arrays or class folders; not a table, text or shards already).
bool converts_to_shards(const ManifestSplit& split);

// Whether `split` (of dataset directory `dir`) is class folders of text files (holds_text_files),
// not of images. False when the folder cannot be listed (reading the split then says why).
bool holds_text_folders(const std::string& dir, const ManifestSplit& split);

// The shards of split `split_name` of dataset directory `dir` (converting it first unless done),
// kept in `cache` (empty: `<dir>/.pstrain-shards`): nullopt when that directory cannot take them
// (read-only, full), and the caller loads the split into memory instead. Throws DataError (or
// DatasetFormatError) for a defect in the files.
std::optional<ConvertedSplit> converted_split(const std::string& dir, const std::string& split_name,
                                              const ManifestSplit& split, const std::string& cache = "");

// A built-in dataset's split (dataset.h known_datasets: IDX files in the data directory or the
// system's), its files converted once into shards in `<cache_root>/.pstrain-shards/<name>/` and
// loaded as stored (its labels in memory, its examples on disk, Split::store set so that workers
// read them themselves); loaded into memory from the files, as load_split does, when the cache
// cannot take them. Either way the same examples, labels and classes. Throws DataError as
// load_split does.
Split load_builtin_split(const std::string& data_dir, const DatasetInfo& info, SplitKind kind,
                         const std::string& cache_root);

}  // namespace pstrain
