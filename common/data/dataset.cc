#include "common/data/dataset.h"

#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>

#include "common/data/dataset_formats.h"
#include "common/base/error.h"
#include "common/data/idx.h"
#include "common/data/stored_examples.h"

namespace pstrain {
namespace {

// `<dir>/<base>.gz`, else `<dir>/<base>`, else "".
std::string file_in(const std::filesystem::path& dir, const std::string& base) {
  namespace fs = std::filesystem;
  const fs::path gz = dir / (base + ".gz");
  if (fs::exists(gz)) return gz.string();
  const fs::path plain = dir / base;
  if (fs::exists(plain)) return plain.string();
  return "";
}

// The directory holding the split's files: the data directory's copy first, then the dataset's
// system directory. Both files of a split come from one directory, so that a partial copy in the
// data directory fails loudly instead of mixing with the system's files.
std::filesystem::path split_dir(const std::string& data_dir, const DatasetInfo& info, const std::string& images_base) {
  namespace fs = std::filesystem;
  const fs::path local = fs::path(data_dir) / info.subdir;
  if (!file_in(local, images_base).empty() || info.system_dir.empty()) return local;
  if (!file_in(info.system_dir, images_base).empty()) return info.system_dir;
  return local;
}

std::string find_file(const std::filesystem::path& dir, const std::string& base, const DatasetInfo& info) {
  std::string found = file_in(dir, base);
  if (!found.empty()) return found;
  const std::string gz = (dir / (base + ".gz")).string();
  std::string message = gz + ": missing (neither it nor " + (dir / base).string();
  if (!info.system_dir.empty() && dir != std::filesystem::path(info.system_dir)) {
    message += " nor " + (std::filesystem::path(info.system_dir) / base).string() + "[.gz]";
  }
  throw DataError(message + " exists; " + info.install_hint + ")");
}

constexpr const char* kFetchHint = "run deploy/fetch-data.sh to make them";

}  // namespace

void Split::read_examples(std::span<const uint32_t> indices, uint8_t* out) const {
  const size_t bytes = example_bytes();
  if (stored) {
    stored->read(indices, out);
    return;
  }
  for (size_t i = 0; i < indices.size(); ++i) {
    if (bytes > 0) std::memcpy(out + i * bytes, examples.data() + size_t{indices[i]} * bytes, bytes);
  }
}

void Split::gather(std::span<const uint32_t> indices, float* columns, float* out_targets) const {
  const uint32_t dim = example_size();
  const size_t bytes = example_bytes();
  // A stored split's examples are read in one call (runs of consecutive ids in one pread).
  std::vector<uint8_t> read;
  if (stored) {
    read.resize(indices.size() * bytes);
    stored->read(indices, read.data());
  }
  for (size_t c = 0; c < indices.size(); ++c) {
    const uint8_t* src = stored ? read.data() + c * bytes : examples.data() + size_t{indices[c]} * bytes;
    float* dst = columns + c * dim;
    if (dtype == Dtype::kFloat32) {
      std::memcpy(dst, src, bytes);
    } else {
      constexpr float kScale = 1.0f / 255.0f;
      for (uint32_t i = 0; i < dim; ++i) dst[i] = static_cast<float>(src[i]) * kScale;
    }
    if (regression()) {
      const float* t = targets.data() + size_t{indices[c]} * target_width;
      std::copy(t, t + target_width, out_targets + c * target_width);
    } else {
      out_targets[c] = static_cast<float>(labels[indices[c]]);
    }
  }
}

void Split::gather(std::span<const uint32_t> indices, float* columns, int32_t* out_labels) const {
  if (regression()) throw DataError("dataset '" + dataset + "' has regression targets, not labels");
  std::vector<float> targets_out(indices.size());
  gather(indices, columns, targets_out.data());
  for (size_t c = 0; c < indices.size(); ++c) out_labels[c] = labels[indices[c]];
}

Split make_split(const std::string& dataset, SplitKind kind, ParsedExamples&& parsed) {
  const std::string where = "dataset '" + dataset + "' (" + (kind == SplitKind::kTrain ? "train" : "test") + " split)";
  const auto fail = [&](const std::string& what) { throw DataError(where + ": " + what); };
  if (parsed.shape.size() != 1 && parsed.shape.size() != 3) {
    fail("an example has " + std::to_string(parsed.shape.size()) + " dimensions; {d} or {h, w, c} expected");
  }
  uint64_t values = 1;
  for (uint32_t d : parsed.shape) {
    if (d == 0) fail("an example's shape has a zero dimension");
    values *= d;
    if (values > std::numeric_limits<uint32_t>::max()) fail("an example has more than 2^32 - 1 values");
  }
  if (parsed.size() > std::numeric_limits<uint32_t>::max()) fail("more than 2^32 - 1 examples");
  if (parsed.bytes.size() != parsed.size() * values * dtype_size(parsed.dtype)) {
    fail(std::to_string(parsed.bytes.size()) + " bytes do not hold " + std::to_string(parsed.size()) + " examples of " +
         std::to_string(values) + " " + std::string(dtype_name(parsed.dtype)) + " values");
  }
  if (parsed.target_width > 0) {
    if (!parsed.labels.empty() || parsed.classes != 0) fail("both class labels and regression targets");
    for (size_t i = 0; i < parsed.targets.size(); ++i) {
      if (!std::isfinite(parsed.targets[i])) {
        fail("target " + std::to_string(parsed.targets[i]) + " of example " + std::to_string(i / parsed.target_width) +
             " is not a finite number");
      }
    }
  } else if (parsed.classes == 0 || parsed.classes > kMaxClasses) {
    fail(std::to_string(parsed.classes) + " classes (at most " + std::to_string(kMaxClasses) + ")");
  }
  for (size_t i = 0; i < parsed.labels.size(); ++i) {
    const int32_t l = parsed.labels[i];
    if (l < 0 || static_cast<uint32_t>(l) >= parsed.classes) {
      fail("label " + std::to_string(l) + " at index " + std::to_string(i) + " is outside [0, " +
           std::to_string(parsed.classes) + ")");
    }
  }
  Split split;
  split.dataset = dataset;
  split.kind = kind;
  split.size = static_cast<uint32_t>(parsed.size());
  split.shape.assign(parsed.shape.begin(), parsed.shape.end());
  split.dtype = parsed.dtype;
  split.num_classes = parsed.classes;
  split.examples = std::move(parsed.bytes);
  split.labels = std::move(parsed.labels);
  split.targets = std::move(parsed.targets);
  split.target_width = parsed.target_width;
  return split;
}

const std::vector<DatasetInfo>& known_datasets() {
  static const std::vector<DatasetInfo> kDatasets = {
      {"mnist10k", "", "mnist10k-train", "mnist10k-test", 10, "", kFetchHint, {28, 28, 1}, 0, nullptr},
      {"fashion", "", "fashion-train", "fashion-test", 10, "", kFetchHint, {28, 28, 1}, 0, nullptr},
      // The official split, as Zalando publishes it and Debian packages it (t10k = test).
      {"fashion-mnist", "fashion-mnist", "train", "t10k", 10, std::string(kDebianFashionMnistDir),
       "install Debian's dataset-fashion-mnist: run deploy/setup.sh", {28, 28, 1}, 0, nullptr},
  };
  return kDatasets;
}

const DatasetInfo* find_dataset(const std::string& name) {
  for (const auto& d : known_datasets()) {
    if (d.name == name) return &d;
  }
  return nullptr;
}

bool is_known_dataset(const std::string& name) { return find_dataset(name) != nullptr; }

std::string known_dataset_names() {
  std::string names;
  for (const auto& d : known_datasets()) names += (names.empty() ? "" : ", ") + d.name;
  return names;
}

Split load_split(const std::string& data_dir, const std::string& dataset, SplitKind kind) {
  if (const DatasetInfo* d = find_dataset(dataset)) return load_split(data_dir, *d, kind);
  throw DataError("unknown dataset '" + dataset + "' (known: " + known_dataset_names() + ")");
}

std::pair<std::string, std::string> split_files(const std::string& data_dir, const DatasetInfo& info, SplitKind kind) {
  const std::string& prefix = kind == SplitKind::kTrain ? info.train_prefix : info.test_prefix;
  const std::string images_base = prefix + "-images-idx3-ubyte";
  const std::filesystem::path dir = split_dir(data_dir, info, images_base);
  return {find_file(dir, images_base, info), find_file(dir, prefix + "-labels-idx1-ubyte", info)};
}

Split load_split(const std::string& data_dir, const DatasetInfo& info, SplitKind kind) {
  const std::string& prefix = kind == SplitKind::kTrain ? info.train_prefix : info.test_prefix;
  const std::string images_base = prefix + "-images-idx3-ubyte";
  const std::filesystem::path dir = split_dir(data_dir, info, images_base);
  const std::string images_path = find_file(dir, images_base, info);
  const std::string labels_path = find_file(dir, prefix + "-labels-idx1-ubyte", info);
  IdxArray images = read_idx(images_path, 3);
  IdxArray labels = read_idx(labels_path, 1);
  if (images.dims[0] != labels.dims[0]) {
    throw DataError(labels_path + ": has " + std::to_string(labels.dims[0]) + " labels but " +
                    images_path + " has " + std::to_string(images.dims[0]) + " images");
  }
  for (size_t i = 0; i < labels.values.size(); ++i) {
    if (labels.values[i] >= info.num_classes) {
      throw DataError(labels_path + ": label " + std::to_string(labels.values[i]) + " at index " +
                      std::to_string(i) + " is outside [0, " + std::to_string(info.num_classes) + ")");
    }
  }

  Split split;
  split.dataset = info.name;
  split.kind = kind;
  split.size = images.dims[0];
  split.shape = {images.dims[1], images.dims[2], 1};
  split.dtype = Dtype::kUint8;
  split.num_classes = info.num_classes;
  split.examples = std::move(images.values);
  split.labels.assign(labels.values.begin(), labels.values.end());
  return split;
}

SplitLoader idx_split_loader(std::string data_dir) {
  return [data_dir = std::move(data_dir)](const std::string& dataset, SplitKind kind) {
    return load_split(data_dir, dataset, kind);
  };
}

}  // namespace pstrain
