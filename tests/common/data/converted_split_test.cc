// Dropped-in splits of arrays converted once into shards (common/data/converted_split.h): the
// loaded split reads from the shards and gathers what the files hold, bit for bit; a second load
// reuses the conversion; a changed file makes a new one (the old one removed); a directory that
// cannot take the shards loads the split into memory as before.
#include "common/data/converted_split.h"

#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "common/base/error.h"
#include "common/data/dataset.h"
#include "common/data/dataset_manifest.h"
#include "common/data/stored_examples.h"
#include "tests/integration/test_encodings.h"
#include "tests/test_support.h"

namespace pstrain {
namespace {
namespace fs = std::filesystem;

// x.npy (n x 5 float32) and y.npy (n int32 labels in [0, 3)) in `dir`, values from `seed`.
void write_npy_split(const std::string& dir, const std::string& split, size_t n, float seed) {
  std::vector<float> x(n * 5);
  std::vector<int32_t> y(n);
  for (size_t i = 0; i < x.size(); ++i) x[i] = seed + 0.25f * static_cast<float>(i % 97) - static_cast<float>(i % 7);
  for (size_t i = 0; i < n; ++i) y[i] = static_cast<int32_t>((i * 7 + static_cast<size_t>(seed)) % 3);
  std::ofstream(dir + "/" + split + "-x.npy", std::ios::binary) << testing::npy("<f4", {n, 5}, x.data(), x.size() * 4);
  std::ofstream(dir + "/" + split + "-y.npy", std::ios::binary) << testing::npy("<i4", {n}, y.data(), y.size() * 4);
}

void write_dataset(const std::string& dir, float seed) {
  fs::create_directories(dir);
  write_npy_split(dir, "train", 300, seed);
  write_npy_split(dir, "test", 40, seed + 1);
  std::ofstream(dir + "/dataset.json") << R"({"train": {"x": "train-x.npy", "y": "train-y.npy"},
                                             "test": {"x": "test-x.npy", "y": "test-y.npy"}, "num_classes": 3})";
}

std::vector<float> all_columns(const Split& s) {
  std::vector<uint32_t> ids(s.size);
  for (uint32_t i = 0; i < s.size; ++i) ids[i] = i;
  std::vector<float> columns(size_t{s.size} * s.example_size());
  std::vector<int32_t> labels(s.size);
  s.gather(ids, columns.data(), labels.data());
  return columns;
}

std::vector<std::string> conversions(const std::string& dir) {
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir + "/.pstrain-shards")) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

}  // namespace

TEST_CASE("converted split - a dropped-in NPY split loads from shards converted once, equal to the files") {
  testing::TempDir data;
  const std::string dir = data.path() + "/blobs";
  write_dataset(dir, 1.0f);
  // The same files read into memory: the conversion cannot make its directory (a file is there).
  testing::TempDir plain;
  const std::string plain_dir = plain.path() + "/blobs";
  write_dataset(plain_dir, 1.0f);
  std::ofstream(plain_dir + "/.pstrain-shards") << "not a directory";
  const Split in_memory = load_directory_split(plain_dir, "blobs", SplitKind::kTrain);
  CHECK(in_memory.stored == nullptr);
  CHECK(in_memory.size == 300);

  const Split train = load_directory_split(dir, "blobs", SplitKind::kTrain);
  REQUIRE(train.stored != nullptr);
  REQUIRE(train.store != nullptr);  // workers that see the directory read it themselves
  CHECK(train.examples.empty());
  CHECK(train.size == 300);
  CHECK(train.num_classes == 3);
  CHECK(train.labels == in_memory.labels);
  CHECK(all_columns(train) == all_columns(in_memory));
  const Split test = load_directory_split(dir, "blobs", SplitKind::kTest);
  CHECK(test.size == 40);
  const std::vector<std::string> first = conversions(dir);
  REQUIRE(first.size() == 2);  // train-<key>, test-<key>

  // Loaded again: the same conversion, not a new one.
  const auto written = fs::last_write_time(dir + "/.pstrain-shards/" + first[1]);
  const Split again = load_directory_split(dir, "blobs", SplitKind::kTrain);
  CHECK(conversions(dir) == first);
  CHECK(fs::last_write_time(dir + "/.pstrain-shards/" + first[1]) == written);
  CHECK(all_columns(again) == all_columns(in_memory));

  // A changed file: a new conversion of that split, the old one gone, the new values read.
  write_npy_split(dir, "train", 200, 5.0f);
  const Split changed = load_directory_split(dir, "blobs", SplitKind::kTrain);
  CHECK(changed.size == 200);
  const std::vector<std::string> now = conversions(dir);
  REQUIRE(now.size() == 2);
  CHECK(now[0] == first[0]);  // the test split's
  CHECK(now[1] != first[1]);
  write_npy_split(plain_dir, "train", 200, 5.0f);
  CHECK(all_columns(changed) == all_columns(load_directory_split(plain_dir, "blobs", SplitKind::kTrain)));
}

TEST_CASE("converted split - a folder split whose folder is missing is an error naming it") {
  testing::TempDir data;
  const std::string dir = data.path() + "/pets";
  fs::create_directories(dir);
  std::ofstream(dir + "/dataset.json") << R"({"train": {"folders": "nowhere"}})";
  try {
    load_directory_split(dir, "pets", SplitKind::kTrain);
    FAIL("a missing folder was read");
  } catch (const DataError& e) {
    CHECK(std::string(e.what()).find("nowhere") != std::string::npos);
  }
}

TEST_CASE("converted split - class folders of text files convert into documents and their profile, not images") {
  testing::TempDir data;
  const std::string dir = data.path() + "/notes";
  for (const char* cls : {"ham", "spam"}) {
    fs::create_directories(dir + "/train/" + cls);
    for (int i = 0; i < 3; ++i) std::ofstream(dir + "/train/" + cls + "/" + std::to_string(i) + ".TXT") << cls << " note " << i;
  }
  std::ofstream(dir + "/dataset.json") << R"({"train": {"folders": "train"}})";
  const DatasetManifest m = read_manifest(dir);
  const ManifestSplit& train = m.splits.at("train");
  CHECK(holds_text_folders(dir, train));
  const std::optional<ConvertedSplit> c = converted_split(dir, "train", train);
  REQUIRE(c);
  CHECK(c->text());
  const ManifestSplit docs = c->as_split_of(dir);
  CHECK(docs.format == ManifestSplit::Format::kText);
  REQUIRE(docs.shards.size() == 1);
  CHECK(docs.shards[0].rfind(".pstrain-shards/train-", 0) == 0);
  struct Labels final : ExampleSink {
    void begin(const std::vector<uint32_t>&, ParsedExamples::Dtype) override {}
    void examples(const uint8_t*, size_t) override {}
    void labels(const int32_t* l, size_t n) override { seen.insert(seen.end(), l, l + n); }
    std::vector<int32_t> seen;
  } labels;
  const ExampleSummary summary = stream_manifest_split(dir, docs, ExampleLimits{}, labels);
  CHECK(labels.seen == std::vector<int32_t>{0, 0, 0, 1, 1, 1});
  CHECK(summary.examples == 6);
  REQUIRE(summary.text);
  CHECK(summary.text->documents == 6);
  CHECK(summary.text->tokens == 18);
  CHECK(summary.class_counts == std::vector<uint64_t>{3, 3});
  // Loaded for a job: the documents stay in their shards, read one by one, labels in memory.
  const Split loaded = load_directory_split(dir, "notes", SplitKind::kTrain);
  CHECK(loaded.documents);
  CHECK(loaded.size == 6);
  CHECK(loaded.labels == std::vector<int32_t>{0, 0, 0, 1, 1, 1});
  REQUIRE(loaded.stored);
  std::vector<uint8_t> document;
  loaded.stored->read_document(0, document);
  CHECK_FALSE(document.empty());
  CHECK_THROWS_AS(loaded.stored->read(std::vector<uint32_t>{0}, document.data()), DataError);
  // A folder with an image among the text files is read as images (and that image is named).
  std::ofstream(dir + "/train/ham/photo.png") << "png?";
  CHECK_FALSE(holds_text_folders(dir, train));
}

TEST_CASE("converted split - which formats convert") {
  ManifestSplit s;
  s.format = ManifestSplit::Format::kNpy;
  CHECK(converts_to_shards(s));
  s.table = "train.table.json";
  CHECK_FALSE(converts_to_shards(s));  // a table loads whole (its preprocessing is fitted on it)
  for (auto f : {ManifestSplit::Format::kNpz, ManifestSplit::Format::kIdx, ManifestSplit::Format::kFolders}) {
    s.format = f;
    CHECK(converts_to_shards(s));
  }
  for (auto f : {ManifestSplit::Format::kCsv, ManifestSplit::Format::kJsonl, ManifestSplit::Format::kShards,
                 ManifestSplit::Format::kText}) {
    s.format = f;
    CHECK_FALSE(converts_to_shards(s));
  }
}

}  // namespace pstrain
