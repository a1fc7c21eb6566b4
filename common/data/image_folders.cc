// Class-folder archives found (find_class_folders) and their images decoded into a split
// (stream_image_folders): image_folders.h.
#include "common/data/image_folders.h"

#include <algorithm>
#include <map>
#include <set>

#include "common/data/format_parts.h"

namespace pstrain {
namespace {

using format_detail::fail;
using format_detail::Kind;

std::vector<std::string> components(const std::string& path) {
  std::vector<std::string> out;
  size_t start = 0;
  for (;;) {
    const size_t slash = path.find('/', start);
    out.push_back(path.substr(start, slash == std::string::npos ? std::string::npos : slash - start));
    if (slash == std::string::npos) return out;
    start = slash + 1;
  }
}

bool hidden(const std::vector<std::string>& parts) {
  return std::any_of(parts.begin(), parts.end(), [](const std::string& p) { return p.empty() || p[0] == '.' || p == "__MACOSX"; });
}

std::string joined(const std::vector<std::string>& names) {
  std::string out;
  for (const auto& n : names) out += (out.empty() ? "" : ", ") + n;
  return out;
}

}  // namespace

ClassFolders find_class_folders(const Archive& archive, const std::string& source, const std::vector<std::string>& fixed,
                                const ExampleLimits& limits) {
  struct Visible {
    std::vector<std::string> parts;
    const ArchiveEntry* entry;
  };
  std::vector<Visible> visible;
  for (const ArchiveEntry& e : archive.entries()) {
    std::vector<std::string> parts = components(e.path);
    if (std::find(parts.begin(), parts.end(), "..") != parts.end()) {
      fail(Kind::kBadFolders, source + ":" + e.path + ": a path with '..' (every file must be inside the archive's folders)");
    }
    if (hidden(parts)) continue;
    if (e.type == ArchiveEntry::Type::kOther) {
      fail(Kind::kBadFolders, source + ":" + e.path + ": a link or special file; class folders must hold plain files");
    }
    visible.push_back({std::move(parts), &e});
  }
  // The root: descend while everything is inside one folder that holds folders.
  std::string root;
  for (size_t depth = 0;; ++depth) {
    std::set<std::string> firsts;
    bool file_here = false;
    for (const Visible& v : visible) {
      firsts.insert(v.parts[depth]);
      if (v.parts.size() == depth + 1 && v.entry->type == ArchiveEntry::Type::kFile) file_here = true;
    }
    // (A single folder of files alone is one class, not a root.)
    const bool deeper = std::any_of(visible.begin(), visible.end(), [&](const Visible& v) { return v.parts.size() > depth + 2; });
    // (A folder named as one of the other split's classes is that class, whatever it holds.)
    const bool is_class = firsts.size() == 1 && std::find(fixed.begin(), fixed.end(), *firsts.begin()) != fixed.end();
    if (firsts.size() != 1 || file_here || !deeper || is_class) {
      for (Visible& v : visible) v.parts.erase(v.parts.begin(), v.parts.begin() + static_cast<std::ptrdiff_t>(depth));
      break;
    }
    root += *firsts.begin() + "/";
    // Drop the folder's own entry: what is left lies deeper.
    visible.erase(std::remove_if(visible.begin(), visible.end(), [&](const Visible& v) { return v.parts.size() == depth + 1; }),
                  visible.end());
  }
  // The classes: the root's folders, each with its files at any depth.
  std::map<std::string, std::vector<const ArchiveEntry*>> folders;
  for (const Visible& v : visible) {
    if (v.parts.size() == 1) {
      if (v.entry->type == ArchiveEntry::Type::kDirectory) folders[v.parts[0]];  // (files at the root are ignored)
      continue;
    }
    auto& files = folders[v.parts[0]];
    if (v.entry->type == ArchiveEntry::Type::kFile) files.push_back(v.entry);
  }
  if (folders.empty()) {
    fail(Kind::kEmpty, source + ": holds no class folders (an archive of folders, one per class, each with its files)");
  }
  ClassFolders out;
  for (const auto& [name, files] : folders) {
    if (files.empty()) fail(Kind::kBadFolders, source + ":" + root + name + "/: the class folder holds no file");
  }
  if (fixed.empty()) {
    for (const auto& [name, _] : folders) out.class_names.push_back(name);
    if (out.class_names.size() < 2) {
      fail(Kind::kTooFewClasses, source + ": one class folder (" + joined(out.class_names) + "); a dataset needs at least 2 classes");
    }
  } else {
    out.class_names = fixed;
    for (const auto& [name, _] : folders) {
      if (std::find(fixed.begin(), fixed.end(), name) == fixed.end()) {
        fail(Kind::kBadFolders, source + ":" + root + name + "/: not a class of the dataset's other split (its classes: " +
                                    joined(fixed) + ")");
      }
    }
  }
  if (out.class_names.size() > limits.max_classes) {
    fail(Kind::kTooLarge, source + ": " + std::to_string(out.class_names.size()) + " class folders, over the cap of " +
                              std::to_string(limits.max_classes));
  }
  out.class_counts.assign(out.class_names.size(), 0);
  for (size_t label = 0; label < out.class_names.size(); ++label) {
    const auto it = folders.find(out.class_names[label]);
    if (it == folders.end()) continue;
    std::vector<const ArchiveEntry*> files = it->second;
    std::sort(files.begin(), files.end(), [](const ArchiveEntry* a, const ArchiveEntry* b) { return a->path < b->path; });
    for (const ArchiveEntry* f : files) out.files.emplace_back(static_cast<int32_t>(label), f);
    out.class_counts[label] = files.size();
    if (out.files.size() > limits.max_examples) {
      fail(Kind::kTooLarge, source + ": more than " + std::to_string(limits.max_examples) + " files, over the cap");
    }
  }
  return out;
}

ExampleSummary stream_image_folders(Archive& archive, const std::string& source, const ImageFolderOptions& options,
                                    ExampleSink& sink, std::vector<std::string>& class_names) {
  const ClassFolders folders = find_class_folders(archive, source, options.class_names, options.limits);
  const uint32_t channels = color_mode_channels(options.color_mode);
  uint32_t height = options.height, width = options.width;
  std::string first;  // the file that fixed the size, when no size was given
  ExampleSummary out;
  for (const auto& [label, entry] : folders.files) {
    const std::string name = source + ":" + entry->path;
    const std::vector<uint8_t> bytes = archive.read(*entry, options.max_file_bytes);
    if (image_format(bytes).empty()) fail(Kind::kBadImage, name + ": not a PNG or JPEG image");
    Image image;
    try {
      image = decode_image(bytes, options.color_mode, name);
    } catch (const DatasetFormatError&) {
      throw;
    } catch (const DataError& e) {
      fail(Kind::kBadImage, e.what());
    }
    if (out.examples == 0) {
      if (height == 0) {
        height = image.height;
        width = image.width;
        first = entry->path;
      }
      const uint64_t per_example = uint64_t{height} * width * channels;
      if (per_example * folders.files.size() > options.limits.max_bytes) {
        fail(Kind::kTooLarge, source + ": " + std::to_string(folders.files.size()) + " images of " + std::to_string(height) +
                                  "x" + std::to_string(width) + "x" + std::to_string(channels) + " exceed the cap of " +
                                  std::to_string(options.limits.max_bytes) + " bytes");
      }
      out.shape = {height, width, channels};
      out.dtype = Dtype::kUint8;
      sink.begin(out.shape, out.dtype);
    }
    if (image.height != height || image.width != width) {
      if (!first.empty()) {
        fail(Kind::kBadImage, name + ": " + std::to_string(image.height) + "x" + std::to_string(image.width) + " pixels, but " +
                                  first + " is " + std::to_string(height) + "x" + std::to_string(width) +
                                  "; give image_size to resize every image to one size");
      }
      image = resize_bilinear(image, height, width);
    }
    sink.examples(image.pixels.data(), image.pixels.size());
    sink.labels(&label, 1);
    ++out.examples;
  }
  out.classes = static_cast<uint32_t>(folders.class_names.size());
  out.class_counts = folders.class_counts;
  class_names = folders.class_names;
  return out;
}

}  // namespace pstrain
