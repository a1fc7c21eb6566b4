// Class-folder datasets, as Keras' image_dataset_from_directory reads them: an archive (archive.h)
// whose top-level folders are the classes, each holding that class's files (at any depth).
//
// The rules (docs/DESIGN-NOTES.md "Dataset store (issue 50)"):
// - the root: while the archive holds a single folder and no file, and that folder holds folders,
//   it is the root (a zip of a folder); files at the root are ignored, as Keras ignores them;
// - hidden entries (a name starting with '.') and macOS's `__MACOSX/` folders are ignored;
// - classes are the root's folder names sorted byte-wise (Keras sorts them: label i is the i-th
//   name), or the names the dataset's other split fixed (a folder not among them is an error, a
//   missing one is a class with no examples); a folder with no file is an error naming it, and so
//   is a link, a path with "..", or fewer than two classes;
// - examples come class by class, each class's files sorted byte-wise by path.
// What each file becomes is the caller's (image_folders.cc: decoded images).
//
// Thread rules: pure functions of their arguments.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/data/archive.h"
#include "common/data/dataset_formats.h"
#include "common/data/image_decode.h"

namespace pstrain {

struct ClassFolders {
  std::vector<std::string> class_names;
  // The files, class by class: (label, entry) in the order they are stored.
  std::vector<std::pair<int32_t, const ArchiveEntry*>> files;
  std::vector<uint64_t> class_counts;
};

// The classes and files of `archive` by the rules above; `fixed` the other split's class names
// (empty: from the folders). Throws DatasetFormatError naming `source` and the entry at fault.
ClassFolders find_class_folders(const Archive& archive, const std::string& source, const std::vector<std::string>& fixed,
                                const ExampleLimits& limits);

struct ImageFolderOptions {
  ColorMode color_mode = ColorMode::kRgb;  // Keras' default
  // The size every image is resized to (bilinear, image_decode.h); 0: each image's own size,
  // which must then be the same for every file.
  uint32_t height = 0, width = 0;
  std::vector<std::string> class_names;  // fixed by the dataset's other split (empty: the folders')
  ExampleLimits limits;
  uint64_t max_file_bytes = uint64_t{64} << 20;  // one encoded image
};

// Decodes every image of a class-folder archive into uint8 examples of shape {height, width,
// channels}, labels the class indices, streamed to `sink` one image at a time (memory: one
// decoded image and the archive's listing). A file that is not a PNG or a JPEG, or does not
// decode, or (without a size) differs in size from the first, is a DatasetFormatError naming it.
// `class_names` receives the classes.
ExampleSummary stream_image_folders(Archive& archive, const std::string& source, const ImageFolderOptions& options,
                                    ExampleSink& sink, std::vector<std::string>& class_names);

}  // namespace pstrain
