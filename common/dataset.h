// Named datasets (mnist10k, fashion) loaded from IDX files in a data directory.
//
// A split keeps its images as bytes (as stored) and converts to floats in [0, 1] only when a
// batch is gathered: a quarter of the memory, and the conversion is free next to the math.
//
// Thread rules: a loaded Split is immutable; any number of threads may gather from it.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace pstrain {

enum class SplitKind { kTrain, kTest };

struct Split {
  std::string dataset;
  SplitKind kind = SplitKind::kTrain;
  uint32_t size = 0;                // number of examples
  uint32_t height = 0, width = 0;   // image size; channels are always 1 for IDX images
  uint32_t num_classes = 0;         // labels are in [0, num_classes)
  std::vector<uint8_t> pixels;      // size * height * width, example-major
  std::vector<uint8_t> labels;      // size

  uint32_t example_size() const { return height * width; }

  // Writes the examples `indices` as columns of a column-major float matrix (example_size() rows,
  // indices.size() columns, values in [0, 1]) and their labels.
  void gather(std::span<const uint32_t> indices, float* columns, int32_t* out_labels) const;
};

// The datasets the project knows, and the files behind them.
struct DatasetInfo {
  std::string name;         // "mnist10k"
  std::string file_prefix;  // "mnist10k" -> mnist10k-train-images-idx3-ubyte.gz
  uint32_t num_classes;
};
const std::vector<DatasetInfo>& known_datasets();
bool is_known_dataset(const std::string& name);

// Loads one split of a named dataset from `data_dir`, accepting `<file>.gz` or the plain
// `<file>`. Throws DataError naming the file for any defect, including an unknown dataset name,
// label/image count mismatches and labels out of range.
Split load_split(const std::string& data_dir, const std::string& dataset, SplitKind kind);

}  // namespace pstrain
