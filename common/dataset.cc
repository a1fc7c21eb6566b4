#include "common/dataset.h"

#include <filesystem>

#include "common/error.h"
#include "common/idx.h"

namespace pstrain {
namespace {

std::string find_file(const std::string& data_dir, const std::string& base) {
  namespace fs = std::filesystem;
  const fs::path gz = fs::path(data_dir) / (base + ".gz");
  if (fs::exists(gz)) return gz.string();
  const fs::path plain = fs::path(data_dir) / base;
  if (fs::exists(plain)) return plain.string();
  throw DataError(gz.string() + ": missing (neither it nor " + plain.string() +
                  " exists; run deploy/fetch-data.sh " + data_dir + ")");
}

}  // namespace

void Split::gather(std::span<const uint32_t> indices, float* columns, int32_t* out_labels) const {
  const uint32_t dim = example_size();
  constexpr float kScale = 1.0f / 255.0f;
  for (size_t c = 0; c < indices.size(); ++c) {
    const uint8_t* src = pixels.data() + size_t{indices[c]} * dim;
    float* dst = columns + c * dim;
    for (uint32_t i = 0; i < dim; ++i) dst[i] = static_cast<float>(src[i]) * kScale;
    out_labels[c] = labels[indices[c]];
  }
}

const std::vector<DatasetInfo>& known_datasets() {
  static const std::vector<DatasetInfo> kDatasets = {
      {"mnist10k", "mnist10k", 10},
      {"fashion", "fashion", 10},
  };
  return kDatasets;
}

bool is_known_dataset(const std::string& name) {
  for (const auto& d : known_datasets()) {
    if (d.name == name) return true;
  }
  return false;
}

Split load_split(const std::string& data_dir, const std::string& dataset, SplitKind kind) {
  const DatasetInfo* info = nullptr;
  for (const auto& d : known_datasets()) {
    if (d.name == dataset) info = &d;
  }
  if (info == nullptr) throw DataError("unknown dataset '" + dataset + "' (known: mnist10k, fashion)");

  const std::string split_name = kind == SplitKind::kTrain ? "train" : "test";
  const std::string images_path =
      find_file(data_dir, info->file_prefix + "-" + split_name + "-images-idx3-ubyte");
  const std::string labels_path =
      find_file(data_dir, info->file_prefix + "-" + split_name + "-labels-idx1-ubyte");
  IdxArray images = read_idx(images_path, 3);
  IdxArray labels = read_idx(labels_path, 1);
  if (images.dims[0] != labels.dims[0]) {
    throw DataError(labels_path + ": has " + std::to_string(labels.dims[0]) + " labels but " +
                    images_path + " has " + std::to_string(images.dims[0]) + " images");
  }
  for (size_t i = 0; i < labels.values.size(); ++i) {
    if (labels.values[i] >= info->num_classes) {
      throw DataError(labels_path + ": label " + std::to_string(labels.values[i]) + " at index " +
                      std::to_string(i) + " is outside [0, " + std::to_string(info->num_classes) + ")");
    }
  }

  Split split;
  split.dataset = dataset;
  split.kind = kind;
  split.size = images.dims[0];
  split.height = images.dims[1];
  split.width = images.dims[2];
  split.num_classes = info->num_classes;
  split.pixels = std::move(images.values);
  split.labels = std::move(labels.values);
  return split;
}

}  // namespace pstrain
