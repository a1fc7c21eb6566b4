// Fuzz target: uploaded archives of class folders (common/data/archive.h, image_folders.h,
// text_folders.h: images, or .txt documents when every file is one) on
// arbitrary bytes written as a file, read as a zip when they start like one and as a tar
// otherwise. Only DataError is an expected answer. What is read must be consistent: every entry
// read has its listed size, and a split streamed from the archive has as many labels as
// examples, each in [0, classes), and as many pixel bytes as its shape says. run.sh gives this
// target -malloc_limit_mb=600 (a PNG or JPEG inside may claim an image of up to 2^26 pixels).
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "common/base/error.h"
#include "common/data/archive.h"
#include "common/data/image_folders.h"
#include "common/data/text_folders.h"
#include "common/data/text_profile.h"
#include "fuzz/fuzz_check.h"

namespace {

using pstrain::fuzz::check;

struct Counting final : pstrain::ExampleSink {
  std::vector<uint32_t> shape;
  uint64_t bytes = 0;
  std::vector<int32_t> label_values;
  void begin(const std::vector<uint32_t>& s, pstrain::Dtype) override { shape = s; }
  void examples(const uint8_t*, size_t n) override { bytes += n; }
  void labels(const int32_t* l, size_t n) override { label_values.insert(label_values.end(), l, l + n); }
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace pstrain;
  static const std::string path = "/tmp/pstrain-fuzz-archive-" + std::to_string(::getpid());
  {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  }
  try {
    std::unique_ptr<Archive> archive = Archive::open(path, "fuzz.archive");
    for (const ArchiveEntry& e : archive->entries()) {
      check(!e.path.empty() && e.path.back() != '/', "a listed path is clean");
      if (e.type != ArchiveEntry::Type::kFile) continue;
      try {
        check(archive->read(e, 1 << 20).size() == e.size, "an entry reads its listed size");
      } catch (const DataError&) {
      }
    }
    const ClassFolders folders = find_class_folders(*archive, "fuzz.archive", {}, ExampleLimits{});
    if (holds_text_files(folders)) {  // text documents: every one stored, UTF-8, read back as written
      static const std::string dir = path + "-text";
      std::filesystem::remove_all(dir);
      std::filesystem::create_directories(dir);
      ShardWriter writer(dir, "train", text_shard_layout());
      TextFolderOptions text;
      text.max_file_bytes = 1 << 20;
      const ExampleSummary summary = stream_text_folders(*archive, "fuzz.archive", folders, text, writer);
      uint64_t stored = 0;
      std::vector<uint8_t> doc;
      for (const ShardInfo& shard : writer.finish()) {
        const ShardFile file(dir + "/" + shard.file);
        for (uint64_t i = 0; i < file.examples(); ++i, ++stored) {
          file.read(i, doc);
          check(!utf8_error(std::string_view(reinterpret_cast<const char*>(doc.data()), doc.size())), "documents are UTF-8");
          check(file.label(i) >= 0 && static_cast<uint32_t>(file.label(i)) < summary.classes, "labels in range");
        }
      }
      check(stored == summary.examples && summary.text && summary.text->documents == stored, "every document stored and profiled");
      return 0;
    }
    ImageFolderOptions options;
    options.color_mode = ColorMode::kRgb;
    options.height = 3;
    options.width = 5;
    options.max_file_bytes = 1 << 20;
    Counting sink;
    std::vector<std::string> classes;
    const ExampleSummary summary = stream_image_folders(*archive, "fuzz.archive", options, sink, classes);
    check(summary.examples == sink.label_values.size(), "a label per example");
    check(summary.examples == 0 || sink.shape == std::vector<uint32_t>{3, 5, 3}, "the shape asked");
    check(sink.bytes == summary.examples * 3 * 5 * 3, "pixels as the shape says");
    check(classes.size() >= 2 && summary.classes == classes.size(), "two classes at least, named");
    for (int32_t l : sink.label_values) check(l >= 0 && static_cast<uint32_t>(l) < summary.classes, "labels in range");
  } catch (const DataError&) {
  }
  return 0;
}
