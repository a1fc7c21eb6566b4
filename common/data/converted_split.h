// A dropped-in dataset directory's split of arrays (IDX, NPY, NPZ, class folders of images),
// converted once into the dataset store's shards beside its files, so that loading it holds its
// labels only (stored_examples.h) and workers read its examples themselves, as for an upload
// (docs/DESIGN-NOTES.md "Dropped-in splits as shards").
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
};

// Whether `split` is converted (arrays or image folders; not a table, text or shards already).
bool converts_to_shards(const ManifestSplit& split);

// The shards of split `split_name` of dataset directory `dir` (converting it first unless done):
// nullopt when the directory cannot take them (read-only, full), and the caller loads the split
// into memory instead. Throws DataError (or DatasetFormatError) for a defect in the files.
std::optional<ConvertedSplit> converted_split(const std::string& dir, const std::string& split_name,
                                              const ManifestSplit& split);

}  // namespace pstrain
