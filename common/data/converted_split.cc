#include "common/data/converted_split.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <limits>
#include <system_error>

#include "common/base/error.h"
#include "common/base/sha256.h"
#include "common/data/archive.h"
#include "common/data/image_folders.h"
#include "common/data/shard_sink.h"
#include "common/data/stored_examples.h"
#include "common/data/text_folders.h"
#include "common/data/text_profile.h"

namespace pstrain {
namespace {
namespace fs = std::filesystem;

constexpr const char* kCacheDir = ".pstrain-shards";

std::string stat_line(const fs::path& path, const std::string& shown) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return shown + ":missing\n";
  return shown + ":" + std::to_string(st.st_size) + ":" + std::to_string(st.st_mtim.tv_sec) + "." +
         std::to_string(st.st_mtim.tv_nsec) + "\n";
}

// The manifest entry and each source file's path, size and mtime (a folder's files, sorted).
std::string conversion_key(const std::string& dir, const std::string& split_name, const ManifestSplit& split) {
  DatasetManifest one;
  one.splits[split_name] = split;
  std::string text = manifest_to_json(one) + "\n";
  for (const std::string& c : split.class_names) text += "class " + c + "\n";  // a folder test split's labels follow them
  if (split.format == ManifestSplit::Format::kFolders) {
    std::vector<std::string> lines;
    const fs::path root = fs::path(dir) / split.folders;
    for (const auto& entry : fs::recursive_directory_iterator(root, fs::directory_options::skip_permission_denied)) {
      if (entry.is_regular_file()) lines.push_back(stat_line(entry.path(), fs::relative(entry.path(), root).string()));
    }
    std::sort(lines.begin(), lines.end());
    for (const auto& l : lines) text += l;
  } else {
    for (const std::string& f : split.files()) text += stat_line(fs::path(dir) / f, f);
  }
  Sha256 hash;
  hash.update(text.data(), text.size());
  return hash.hex().substr(0, 16);
}

// A conversion in place: its manifest names the shards.
std::optional<ConvertedSplit> read_converted(const fs::path& at) {
  std::error_code ec;
  if (!fs::exists(at / kManifestFile, ec)) return std::nullopt;
  const DatasetManifest m = read_manifest(at.string());
  const auto it = m.splits.find("train");  // (a manifest's one split must be its train split)
  if (it == m.splits.end()) return std::nullopt;
  const ManifestSplit& s = it->second;
  if (s.format == ManifestSplit::Format::kText) return ConvertedSplit{at.string(), s.shards, {}, Dtype::kUint8, s.profile};
  if (s.format != ManifestSplit::Format::kShards) return std::nullopt;
  return ConvertedSplit{at.string(), s.shards, s.shape, s.dtype, ""};
}

// The class folders of a kFolders split, listed (the test split's classes are the dataset's).
ClassFolders list_folders(const std::string& dir, const ManifestSplit& split, std::unique_ptr<Archive>* folder) {
  *folder = Archive::open_directory((fs::path(dir) / split.folders).string(), split.folders);
  return find_class_folders(**folder, split.folders, split.class_names, ExampleLimits{});
}

// Writes the split's documents into `tmp`'s shards and profile; returns the manifest's split.
ManifestSplit write_text_folders(const std::string& dir, const std::string& split_name, const ManifestSplit& split,
                                 const fs::path& tmp) {
  std::unique_ptr<Archive> folder;
  const ClassFolders folders = list_folders(dir, split, &folder);
  ShardWriter writer(tmp.string(), split_name, text_shard_layout());
  const ExampleSummary summary = stream_text_folders(*folder, split.folders, folders, TextFolderOptions{}, writer);
  ManifestSplit out;
  out.format = ManifestSplit::Format::kText;
  for (const ShardInfo& s : writer.finish()) out.shards.push_back(s.file);
  out.profile = split_name + "-text.json";
  std::ofstream profile(tmp / out.profile, std::ios::binary | std::ios::trunc);
  profile << text_profile_to_json(*summary.text) << "\n";
  profile.flush();
  if (!profile) throw fs::filesystem_error("cannot write the profile", tmp / out.profile, std::make_error_code(std::errc::io_error));
  return out;
}

}  // namespace

ManifestSplit ConvertedSplit::as_split_of(const std::string& dataset_dir) const {
  const fs::path rel = fs::relative(dir, dataset_dir);
  ManifestSplit s;
  s.format = text() ? ManifestSplit::Format::kText : ManifestSplit::Format::kShards;
  for (const std::string& f : shards) s.shards.push_back((rel / f).string());
  s.shape = shape;
  s.dtype = dtype;
  if (text()) s.profile = (rel / profile).string();
  return s;
}

bool holds_text_folders(const std::string& dir, const ManifestSplit& split) {
  if (split.format != ManifestSplit::Format::kFolders) return false;
  try {
    std::unique_ptr<Archive> folder;
    return holds_text_files(list_folders(dir, split, &folder));
  } catch (const std::exception&) {
    return false;
  }
}

bool converts_to_shards(const ManifestSplit& split) {
  switch (split.format) {
    case ManifestSplit::Format::kIdx:
    case ManifestSplit::Format::kNpz:
    case ManifestSplit::Format::kFolders: return true;
    case ManifestSplit::Format::kNpy: return split.table.empty();
    default: return false;
  }
}

std::optional<ConvertedSplit> converted_split(const std::string& dir, const std::string& split_name,
                                              const ManifestSplit& split, const std::string& cache_dir) {
  const fs::path cache = cache_dir.empty() ? fs::path(dir) / kCacheDir : fs::path(cache_dir);
  std::string key;
  try {
    key = conversion_key(dir, split_name, split);
  } catch (const fs::filesystem_error&) {
    return std::nullopt;  // e.g. a missing folder: reading the split says so, naming it
  }
  const fs::path final_dir = cache / (split_name + "-" + key);
  if (auto done = read_converted(final_dir)) return done;

  std::error_code ec;
  fs::create_directories(cache, ec);
  if (ec) return std::nullopt;
  static std::atomic<uint64_t> counter{0};
  const fs::path tmp = cache / (".tmp-" + split_name + "-" + std::to_string(::getpid()) + "-" + std::to_string(++counter));
  fs::remove_all(tmp, ec);
  if (!fs::create_directories(tmp, ec) || ec) return std::nullopt;
  struct Cleanup {
    fs::path path;
    ~Cleanup() {
      std::error_code ignored;
      if (!path.empty()) fs::remove_all(path, ignored);
    }
  } cleanup{tmp};

  DatasetManifest m;
  ManifestSplit& out = m.splits["train"];
  try {
    if (holds_text_folders(dir, split)) {
      out = write_text_folders(dir, split_name, split, tmp);
    } else {
      ShardSink sink(tmp.string(), split_name);
      // The shards are on disk and only the labels are held (4 bytes an example): no cap of what
      // fits in memory (ExampleLimits' defaults), only a split's 32-bit ids.
      ExampleLimits limits;
      limits.max_examples = std::numeric_limits<uint32_t>::max();
      limits.max_bytes = std::numeric_limits<uint64_t>::max();
      const ExampleSummary summary = stream_manifest_split(dir, split, limits, sink, nullptr);
      out.format = ManifestSplit::Format::kShards;
      for (const ShardInfo& s : sink.finish(summary.target_width)) out.shards.push_back(s.file);
      out.shape = summary.shape;
      out.dtype = summary.dtype;
    }
  } catch (const std::filesystem::filesystem_error&) {
    return std::nullopt;  // e.g. no room: the caller loads the split into memory
  }
  write_manifest(tmp.string(), m);

  if (::rename(tmp.c_str(), final_dir.c_str()) != 0) {
    // Another process converted it first (its directory is whole), or the rename failed.
    if (auto done = read_converted(final_dir)) return done;
    return std::nullopt;
  }
  cleanup.path.clear();
  // Older conversions of this split (their files changed since): best effort.
  for (const auto& entry : fs::directory_iterator(cache, ec)) {
    const std::string name = entry.path().filename().string();
    if (name != final_dir.filename().string() && name.rfind(split_name + "-", 0) == 0) fs::remove_all(entry.path(), ec);
  }
  return read_converted(final_dir);
}

Split load_builtin_split(const std::string& data_dir, const DatasetInfo& info, SplitKind kind,
                         const std::string& cache_root) {
  const auto [images, labels] = split_files(data_dir, info, kind);
  // The files by name in their directory (both are in one: split_dir), so that the conversion's
  // key is the same whichever path reaches them (a symlinked data directory, another mount).
  const fs::path from = fs::path(images).parent_path();
  const bool together = fs::path(labels).parent_path() == from;
  ManifestSplit idx;
  idx.format = ManifestSplit::Format::kIdx;
  idx.images = together ? fs::path(images).filename().string() : images;
  idx.labels = together ? fs::path(labels).filename().string() : labels;
  const std::string split_name = kind == SplitKind::kTrain ? "train" : "test";
  const std::optional<ConvertedSplit> converted = converted_split(
      together ? from.string() : "", split_name, idx, (fs::path(cache_root) / kCacheDir / info.name).string());
  if (!converted) return load_split(data_dir, info, kind);
  Split split = load_stored_split(converted->dir, converted->shards, converted->shape, converted->dtype, info.name, kind);
  // load_stored_split's class count is the largest label + 1: the table's is the dataset's.
  if (split.num_classes > info.num_classes) {
    throw DataError(labels + ": a label is outside [0, " + std::to_string(info.num_classes) + ")");
  }
  split.num_classes = info.num_classes;
  return split;
}

}  // namespace pstrain
