// Class-folder archives (common/data/archive.h, image_folders.h): zip and tar archives of the
// same folders give the same examples in the same order (classes sorted, files sorted), PNG pixels
// exactly, JPEG within a few levels; the root folder, hidden files and root files as the rules
// say; images resized to image_size; and each defect (a corrupt file, a non-image, an empty class
// folder, one class, a size that differs, a folder the other split lacks) a DatasetFormatError
// naming the file or folder.
#include "common/data/image_folders.h"

#include <doctest/doctest.h>
#include <png.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "common/data/dataset_manifest.h"
#include "common/data/format_parts.h"
#include "tests/image_files.h"
#include "tests/test_support.h"

namespace pstrain {
namespace {

using testing::ArchiveFiles;
using testing::TempDir;
using Kind = DatasetFormatError::Kind;

struct Collected final : ExampleSink {
  std::vector<uint32_t> shape;
  std::vector<uint8_t> bytes;
  std::vector<int32_t> label_values;
  void begin(const std::vector<uint32_t>& s, Dtype) override { shape = s; }
  void examples(const uint8_t* b, size_t n) override { bytes.insert(bytes.end(), b, b + n); }
  void labels(const int32_t* l, size_t n) override { label_values.insert(label_values.end(), l, l + n); }
};

std::vector<uint8_t> gray(uint32_t h, uint32_t w, uint8_t seed) {
  std::vector<uint8_t> px(size_t{h} * w);
  for (size_t i = 0; i < px.size(); ++i) px[i] = static_cast<uint8_t>(seed * 37 + i * 11);
  return px;
}

std::vector<uint8_t> png_gray(uint32_t h, uint32_t w, uint8_t seed) {
  return testing::write_png(gray(h, w, seed), h, w, PNG_FORMAT_GRAY);
}

struct Read {
  ExampleSummary summary;
  Collected sink;
  std::vector<std::string> classes;
};

Read read(const std::string& path, ImageFolderOptions options = {}) {
  Read r;
  std::unique_ptr<Archive> archive = Archive::open(path, "train.zip");
  r.summary = stream_image_folders(*archive, "train.zip", options, r.sink, r.classes);
  return r;
}

// The error's kind and message of reading `files` as a zip.
std::pair<Kind, std::string> failure(const std::string& dir, const ArchiveFiles& files, ImageFolderOptions options = {}) {
  const std::string path = dir + "/bad.zip";
  testing::write_zip(path, files);
  try {
    read(path, options);
  } catch (const DatasetFormatError& e) {
    return {e.kind(), e.what()};
  }
  FAIL("no error for an archive that has one");
  return {};
}

TEST_CASE("zip and tar archives of class folders give the classes sorted and each class's files sorted, pixels exact") {
  TempDir dir;
  // A zip of a folder "photos/": classes "dog" and "cat" (listed out of order), a nested file,
  // a hidden file, a macOS fork, and a file at the root (ignored).
  const ArchiveFiles files = {
      {"photos/", {}},
      {"photos/dog/", {}},
      {"photos/dog/b.png", png_gray(3, 4, 1)},
      {"photos/dog/a.png", png_gray(3, 4, 2)},
      {"photos/cat/deep/z.png", png_gray(3, 4, 3)},
      {"photos/cat/y.png", png_gray(3, 4, 4)},
      {"photos/cat/.DS_Store", {'x'}},
      {"__MACOSX/photos/cat/._y.png", {'x'}},
      {"photos/README.txt", {'h', 'i'}},
  };
  testing::write_zip(dir.path() + "/a.zip", files);
  testing::write_tar(dir.path() + "/a.tar", files);
  ImageFolderOptions options;
  options.color_mode = ColorMode::kGrayscale;
  const Read zip = read(dir.path() + "/a.zip", options);
  const Read tar = read(dir.path() + "/a.tar", options);
  CHECK(zip.classes == std::vector<std::string>{"cat", "dog"});
  CHECK(zip.summary.classes == 2);
  CHECK(zip.summary.class_counts == std::vector<uint64_t>{2, 2});
  CHECK(zip.sink.shape == std::vector<uint32_t>{3, 4, 1});
  CHECK(zip.sink.label_values == std::vector<int32_t>{0, 0, 1, 1});
  std::vector<uint8_t> expected;
  for (uint8_t seed : {3, 4, 2, 1}) {  // cat/deep/z, cat/y, dog/a, dog/b
    const auto px = gray(3, 4, seed);
    expected.insert(expected.end(), px.begin(), px.end());
  }
  CHECK(zip.sink.bytes == expected);
  CHECK(tar.classes == zip.classes);
  CHECK(tar.sink.label_values == zip.sink.label_values);
  CHECK(tar.sink.bytes == zip.sink.bytes);
}

TEST_CASE("a tar's long paths (pax headers) are read, and colour JPEGs are decoded and resized to image_size") {
  TempDir dir;
  const std::string long_folder = "a-class-whose-folder-name-is-long/" + std::string(90, 'n') + "/";
  const ArchiveFiles files = {
      {long_folder + "photo.jpg", testing::write_jpeg(testing::gradient(16, 12), 16, 12)},
      {"other/x.png", testing::write_png(testing::gradient(8, 8), 8, 8, PNG_FORMAT_RGB)},
  };
  testing::write_tar(dir.path() + "/b.tar", files);
  ImageFolderOptions options;
  options.height = 4;
  options.width = 6;
  const Read r = read(dir.path() + "/b.tar", options);
  CHECK(r.classes == std::vector<std::string>{"a-class-whose-folder-name-is-long", "other"});
  CHECK(r.sink.shape == std::vector<uint32_t>{4, 6, 3});
  REQUIRE(r.sink.bytes.size() == 2 * 4 * 6 * 3);
  // The gradient resized: red rises along x, green along y (within JPEG's few levels).
  CHECK(r.sink.bytes[0] < r.sink.bytes[(5) * 3]);
  CHECK(r.sink.bytes[1] < r.sink.bytes[(3 * 6) * 3 + 1]);
  CHECK(std::abs(int{r.sink.bytes[2]} - 128) <= 4);
}

TEST_CASE("a corrupt image, a non-image, an empty class folder, one class and a differing size are errors naming them") {
  TempDir dir;
  const std::string d = dir.path();
  std::vector<uint8_t> truncated = png_gray(5, 5, 1);
  truncated.resize(truncated.size() / 2);
  auto [k1, m1] = failure(d, {{"a/1.png", png_gray(5, 5, 1)}, {"b/broken.png", truncated}});
  CHECK(k1 == Kind::kBadImage);
  CHECK(m1.find("train.zip:b/broken.png") != std::string::npos);
  auto [k2, m2] = failure(d, {{"a/1.png", png_gray(5, 5, 1)}, {"b/notes.txt", {'h', 'e', 'l', 'l', 'o'}}});
  CHECK(k2 == Kind::kBadImage);
  CHECK(m2.find("train.zip:b/notes.txt: not a PNG or JPEG image") != std::string::npos);
  auto [k3, m3] = failure(d, {{"a/1.png", png_gray(5, 5, 1)}, {"b/2.png", png_gray(5, 5, 2)}, {"c/", {}}});
  CHECK(k3 == Kind::kBadFolders);
  CHECK(m3.find("train.zip:c/: the class folder holds no file") != std::string::npos);
  auto [k4, m4] = failure(d, {{"set/only/1.png", png_gray(5, 5, 1)}, {"set/only/2.png", png_gray(5, 5, 2)}});
  CHECK(k4 == Kind::kTooFewClasses);
  CHECK(m4.find("only") != std::string::npos);
  auto [k5, m5] = failure(d, {{"a/1.png", png_gray(5, 5, 1)}, {"b/2.png", png_gray(6, 5, 2)}});
  CHECK(k5 == Kind::kBadImage);
  CHECK(m5.find("train.zip:b/2.png: 6x5 pixels, but a/1.png is 5x5") != std::string::npos);
  auto [k6, m6] = failure(d, {{"../a/1.png", png_gray(5, 5, 1)}, {"b/2.png", png_gray(5, 5, 2)}});
  CHECK(k6 == Kind::kBadFolders);
  ImageFolderOptions fixed;
  fixed.class_names = {"a", "b"};
  auto [k7, m7] = failure(d, {{"a/1.png", png_gray(5, 5, 1)}, {"c/2.png", png_gray(5, 5, 2)}}, fixed);
  CHECK(k7 == Kind::kBadFolders);
  CHECK(m7.find("c/: not a class of the dataset's other split (its classes: a, b)") != std::string::npos);
  // Malformed pax headers (a negative or overlong record length) are errors, never a loop or a
  // read outside the header.
  for (const std::string& pax : {std::string("6 a=b\n6 c=d\n-6 x\n"), std::string("6 a=b\n-6 x\n"), std::string("99 a=b\n"),
                                std::string("1 \n")}) {
    testing::write_tar_with_pax(d + "/pax.tar", pax, "a/1.png", png_gray(5, 5, 1));
    try {
      read(d + "/pax.tar");
      FAIL("a malformed pax header was read");
    } catch (const DatasetFormatError& e) {
      CHECK(std::string(e.what()).find("a malformed pax header") != std::string::npos);
    }
  }
  // Not an archive at all.
  testing::write_tar(d + "/empty.tar", {});
  std::ofstream(d + "/junk.bin") << "this is not an archive, not even a tar header of 512 bytes";
  CHECK_THROWS_AS(read(d + "/junk.bin"), DatasetFormatError);
  CHECK_THROWS_AS(read(d + "/empty.tar"), DatasetFormatError);
}

TEST_CASE("the other split's classes fix the labels: a class missing from this split has no examples") {
  TempDir dir;
  testing::write_zip(dir.path() + "/t.zip", {{"c/1.png", png_gray(2, 2, 1)}, {"a/2.png", png_gray(2, 2, 2)}});
  ImageFolderOptions options;
  options.color_mode = ColorMode::kGrayscale;
  options.class_names = {"a", "b", "c"};
  const Read r = read(dir.path() + "/t.zip", options);
  CHECK(r.classes == options.class_names);
  CHECK(r.summary.classes == 3);
  CHECK(r.summary.class_counts == std::vector<uint64_t>{1, 0, 1});
  CHECK(r.sink.label_values == std::vector<int32_t>{0, 2});
}

}  // namespace
}  // namespace pstrain

namespace pstrain {
namespace {

using testing::TempDir;

void write_file(const std::string& path, const std::vector<uint8_t>& bytes) {
  std::filesystem::create_directories(std::filesystem::path(path).parent_path());
  std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}

TEST_CASE("a dataset directory with folder splits: classes from the train folders, the test split read with them") {
  TempDir dir;
  const std::string d = dir.path() + "/pets";
  write_file(d + "/train/dog/1.png", png_gray(3, 3, 1));
  write_file(d + "/train/cat/1.png", png_gray(3, 3, 2));
  write_file(d + "/train/cat/2.png", png_gray(3, 3, 3));
  write_file(d + "/train/emu/1.png", png_gray(3, 3, 4));
  write_file(d + "/test/dog/9.png", png_gray(3, 3, 5));
  std::ofstream(d + "/dataset.json") << R"({"train": {"folders": "train", "color_mode": "grayscale"},
                                            "test": {"folders": "test", "color_mode": "grayscale", "image_size": [3, 3]}})";
  const DatasetManifest m = read_manifest(d);
  CHECK(m.class_names == std::vector<std::string>{"cat", "dog", "emu"});
  const Split train = load_directory_split(d, "pets", SplitKind::kTrain);
  CHECK(train.size == 4);
  CHECK(train.num_classes == 3);
  CHECK(train.labels == std::vector<int32_t>{0, 0, 1, 2});
  const Split test = load_directory_split(d, "pets", SplitKind::kTest);
  CHECK(test.size == 1);
  CHECK(test.num_classes == 3);
  CHECK(test.labels == std::vector<int32_t>{1});
  // A manifest that names the classes fixes them; a folder outside them is an error naming it.
  std::ofstream(d + "/dataset.json") << R"({"train": {"folders": "train", "color_mode": "grayscale"}, "class_names": ["cat", "dog"]})";
  try {
    load_directory_split(d, "pets", SplitKind::kTrain);
    FAIL("a folder outside class_names was read");
  } catch (const DataError& e) {
    CHECK(std::string(e.what()).find("train:emu/: not a class") != std::string::npos);
  }
}

}  // namespace
}  // namespace pstrain
