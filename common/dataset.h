// Named datasets (mnist10k, fashion, fashion-mnist) loaded from IDX files.
//
// A split keeps its images as bytes (as stored) and converts to floats in [0, 1] only when a
// batch is gathered: a quarter of the memory, and the conversion is free next to the math.
//
// Where the files are: in the data directory (flag --data-dir), or in `<data dir>/<subdir>` for a
// dataset that names a subdirectory. A dataset that a Debian package ships (fashion-mnist, from
// `dataset-fashion-mnist`) also names the package's directory, read when the data directory
// holds no copy: deploy/setup.sh installs the package, so it needs no download.
//
// Thread rules: a loaded Split is immutable; any number of threads may gather from it.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/param_layout.h"

namespace pstrain {

enum class SplitKind { kTrain, kTest };

struct Split {
  std::string dataset;
  SplitKind kind = SplitKind::kTrain;
  uint32_t size = 0;                // number of examples
  uint32_t height = 0, width = 0;   // image size, from the files
  uint32_t channels = 1;            // IDX images are single-channel
  uint32_t num_classes = 0;         // labels are in [0, num_classes): the dataset table's count
  std::vector<uint8_t> pixels;      // size * height * width * channels, example-major
  std::vector<uint8_t> labels;      // size

  uint32_t example_size() const { return height * width * channels; }
  // [height, width, channels]: the shape of one example as loaded.
  Shape example_shape() const { return {height, width, channels}; }

  // Writes the examples `indices` as columns of a column-major float matrix (example_size() rows,
  // indices.size() columns, values in [0, 1]) and their labels.
  void gather(std::span<const uint32_t> indices, float* columns, int32_t* out_labels) const;
};

// Where Debian's `dataset-fashion-mnist` package puts the official Fashion-MNIST files
// (train-images-idx3-ubyte.gz, train-labels-idx1-ubyte.gz, t10k-images-idx3-ubyte.gz,
// t10k-labels-idx1-ubyte.gz): the fallback of the `fashion-mnist` dataset.
inline constexpr std::string_view kDebianFashionMnistDir = "/usr/share/datasets/fashion-mnist";

// The datasets the project knows, and the files behind them. A split's files are
// `<prefix>-images-idx3-ubyte` and `<prefix>-labels-idx1-ubyte`, each gzip'd (`.gz`) or plain.
//
// A dataset describes itself: the shape of one example and the number of classes. For the known
// datasets both come from this table, so a job spec is checked against them at submit without
// loading anything; loading then takes the image size from the files (an IDX image is
// [rows, cols, 1]) and the class count from the table, rejecting labels outside it. The class
// count is fixed rather than computed from the labels (max + 1) so that it does not depend on
// which labels a split happens to contain, and so that submit and job start agree.
struct DatasetInfo {
  std::string name;          // "mnist10k"
  std::string subdir;        // directory under the data directory holding the files ("": none)
  std::string train_prefix;  // "mnist10k-train" -> mnist10k-train-images-idx3-ubyte.gz
  std::string test_prefix;   // "mnist10k-test"
  uint32_t num_classes;      // labels are in [0, num_classes)
  std::string system_dir;    // read when the data directory has no copy ("": no fallback)
  std::string install_hint;  // what to run when the files are missing everywhere
  // One example: [height, width, channels] for images. Empty: known only once the files are
  // loaded (the submit-time check of the input shape is then skipped; job start still checks).
  Shape example_shape = {};
};
const std::vector<DatasetInfo>& known_datasets();
bool is_known_dataset(const std::string& name);
// The known dataset called `name`, or nullptr.
const DatasetInfo* find_dataset(const std::string& name);
// The known names, comma-separated ("mnist10k, fashion, fashion-mnist"), for error messages.
std::string known_dataset_names();

// Loads one split of a named dataset from `data_dir` (or its fallback directory, see DatasetInfo),
// accepting `<file>.gz` or the plain `<file>`. Throws DataError naming the file for any defect,
// including an unknown dataset name (the message lists the known ones), label/image count
// mismatches and labels out of range.
Split load_split(const std::string& data_dir, const std::string& dataset, SplitKind kind);

// The files a split of `info` is read from: {images, labels}, each `.gz` or plain, from the data
// directory or the fallback (as load_split picks them). Throws DataError if either is missing.
std::pair<std::string, std::string> split_files(const std::string& data_dir, const DatasetInfo& info, SplitKind kind);

// The same for a dataset described by `info` (known or not): what load_split does after the lookup.
Split load_split(const std::string& data_dir, const DatasetInfo& info, SplitKind kind);

}  // namespace pstrain
