// DatasetCatalog without HTTP: dropped-in dataset directories, records kept across restarts in
// RocksDB, loading for training, and an upload converted to the store's shard files
// (common/data/shard_file.h).
#include <doctest/doctest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <future>
#include <numeric>
#include <set>

#include "common/data/dataset.h"
#include "common/data/dataset_manifest.h"
#include "common/data/stored_examples.h"
#include "common/data/shard_file.h"
#include "common/storage/kv_store.h"
#include "coordinator/datasets/dataset_catalog.h"
#include "tests/test_support.h"

using namespace pstrain;
namespace fs = std::filesystem;

namespace {

void write(const std::string& path, const std::string& text) {
  fs::create_directories(fs::path(path).parent_path());
  std::ofstream(path) << text;
}

std::unique_ptr<KvStore> open_kv(const std::string& dir) {
  std::string error;
  auto kv = KvStore::open(dir, &error);
  REQUIRE_MESSAGE(kv != nullptr, error);
  return kv;
}

DatasetCatalog::UploadResult ingest(DatasetCatalog& catalog, DatasetCatalog::Upload upload) {
  std::promise<DatasetCatalog::UploadResult> done;
  catalog.ingest(std::move(upload), [&](DatasetCatalog::UploadResult r) { done.set_value(std::move(r)); });
  return done.get_future().get();
}

}  // namespace

TEST_CASE("DatasetCatalog picks up a dropped-in directory, lists a broken one with its error, and keeps records") {
  testing::TempDir dir;
  const std::string data = dir.file("data");
  write(data + "/iris3/train.csv", "a,b,y\n1,2,0\n2,3,1\n3,4,2\n4,5,1\n");
  write(data + "/iris3/test.csv", "a,b,y\n1,2,0\n2,3,1\n");
  write(data + "/iris3/dataset.json", R"({"train": {"csv": "train.csv", "label": "y"}, "test": {"csv": "test.csv", "label": "y"}})");
  write(data + "/broken/dataset.json", R"({"train": {"csv": "missing.csv"}})");
  write(data + "/NotAName/dataset.json", R"({"train": {"csv": "x.csv"}})");  // ignored (logged)
  write(data + "/plain-dir/readme.txt", "no manifest: not a dataset");

  const auto kv = open_kv(dir.file("state"));
  {
    DatasetCatalog catalog({data, "", 1 << 20, {}}, *kv, nullptr);
    catalog.wait_idle();
    const auto iris = catalog.get("iris3");
    REQUIRE(iris.has_value());
    CHECK(iris->source == "directory");
    CHECK(iris->usable());
    CHECK(iris->shape == std::vector<uint32_t>{2});
    CHECK(iris->dtype == ParsedExamples::Dtype::kFloat32);
    CHECK(iris->num_classes == 3);
    CHECK(iris->splits.at("train").examples == 4);
    CHECK(iris->splits.at("train").class_counts == std::vector<uint64_t>{1, 2, 1});
    CHECK(iris->splits.at("test").class_counts == std::vector<uint64_t>{1, 1, 0});  // padded to 3 classes
    REQUIRE(iris->splits.at("train").files.size() == 1);
    CHECK(iris->splits.at("train").files[0].sha256.size() == 64);

    const auto broken = catalog.get("broken");
    REQUIRE(broken.has_value());
    CHECK(!broken->usable());
    CHECK(broken->error.find("missing.csv") != std::string::npos);
    std::string why;
    CHECK(!catalog.info("broken", &why).has_value());
    CHECK(why.find("cannot be used") != std::string::npos);
    CHECK(!catalog.get("NotAName").has_value());
    CHECK(!catalog.get("plain-dir").has_value());

    // Loaded for training: what the files hold.
    const Split train = catalog.load("iris3", SplitKind::kTrain);
    CHECK(train.size == 4);
    CHECK(train.num_classes == 3);
  }
  // A restart keeps the records (the same checksums) without re-reading unchanged files. From the
  // first read on, every dataset known then is listed: the built-in ones and those stored, each
  // "indexing" until its files are read (the start-up indexing runs on the catalog's thread).
  fs::remove_all(data + "/broken");  // gone since: listed at first, then no more
  DatasetCatalog again({data, "", 1 << 20, {}}, *kv, nullptr);
  std::set<std::string> first;
  for (const DatasetRecord& r : again.list()) first.insert(r.name);
  CHECK(first.count("mnist10k") == 1);
  CHECK(first.count("fashion-mnist") == 1);
  CHECK(first.count("iris3") == 1);
  again.wait_idle();
  for (const DatasetRecord& r : again.list()) CHECK(!r.indexing);
  CHECK(!again.get("broken").has_value());
  CHECK(dataset_json(*again.get("iris3"), {}).find("\"state\":\"ready\"") != std::string::npos);
  REQUIRE(again.get("iris3").has_value());
  CHECK(again.get("iris3")->splits.at("train").files[0].sha256.size() == 64);
}

TEST_CASE("DatasetCatalog stores an upload as shards in the uploads directory, refuses a second train split, and deletes") {
  testing::TempDir dir;
  const std::string data = dir.file("uploads");  // where uploads go; the data directory is another
  fs::create_directories(data);
  fs::create_directories(dir.file("data"));
  const std::unique_ptr<KvStore> kv = KvStore::in_memory();
  DatasetCatalog catalog({dir.file("data"), data, 1 << 20, {}}, *kv,
                         [](const std::string&) { return std::vector<std::string>{}; });
  catalog.wait_idle();

  const std::string body = catalog.new_staging_path();
  write(body, "f1,f2,f3,label\n0.5,1,2,0\n1.5,1,2,1\n2.5,1,2,1\n");
  DatasetCatalog::Upload upload;
  upload.name = "tiny";
  upload.split = "train";
  upload.body_path = body;
  const auto result = ingest(catalog, upload);
  REQUIRE_MESSAGE(!result.error, result.error->detail);
  CHECK(result.status == 201);
  CHECK(!fs::exists(body));  // the staged body is gone
  const DatasetManifest m = read_manifest(data + "/tiny");
  REQUIRE(m.splits.count("train") == 1);
  const ManifestSplit& train = m.splits.at("train");
  CHECK(train.format == ManifestSplit::Format::kShards);
  CHECK(train.shape == std::vector<uint32_t>{3});
  CHECK(train.dtype == Dtype::kFloat32);
  CHECK(!train.table.empty());
  CHECK(m.source == "upload");

  // One shard: the three rows as float32, their labels, and a CRC that checks.
  REQUIRE(train.shards.size() == 1);
  const ShardFile shard(data + "/tiny/" + train.shards[0]);
  CHECK(shard.examples() == 3);
  CHECK(shard.layout().example_bytes == 12);
  CHECK(shard.layout().labels == LabelKind::kClass);
  CHECK_NOTHROW(shard.verify());
  std::vector<uint8_t> row;
  shard.read(0, row);
  float first = 0;
  std::memcpy(&first, row.data(), 4);
  CHECK(first == 0.5f);
  CHECK(shard.label(0) == 0);
  CHECK(shard.label(2) == 1);

  DatasetCatalog::Upload again = upload;
  again.body_path = catalog.new_staging_path();
  write(again.body_path, "f1,label\n1,0\n");
  const auto refused = ingest(catalog, again);
  REQUIRE(refused.error.has_value());
  CHECK(refused.error->status == 409);
  CHECK(!fs::exists(again.body_path));

  CHECK(!catalog.erase("tiny").has_value());
  CHECK(!catalog.get("tiny").has_value());
  CHECK(!fs::exists(data + "/tiny"));
  CHECK(catalog.erase("tiny")->status == 404);
}

TEST_CASE("DatasetCatalog splits a regression dataset at random, seeded, keeping every example once") {
  testing::TempDir dir;
  const std::string data = dir.file("uploads");
  fs::create_directories(data);
  fs::create_directories(dir.file("data"));
  const std::unique_ptr<KvStore> kv = KvStore::in_memory();
  DatasetCatalog catalog({dir.file("data"), data, 1 << 20, {}}, *kv,
                         [](const std::string&) { return std::vector<std::string>{}; });
  catalog.wait_idle();
  const auto split = [&catalog](const std::string& name, double fraction, uint64_t seed) {
    std::promise<DatasetCatalog::SplitResult> done;
    catalog.split(name, fraction, seed, [&](DatasetCatalog::SplitResult r) { done.set_value(std::move(r)); });
    return done.get_future().get();
  };
  // 101 rows, target = 10 x + 0.5 (a fraction: a regression dataset), x = 0 .. 100.
  std::string csv = "x,label\n";
  for (int i = 0; i <= 100; ++i) csv += std::to_string(i) + "," + std::to_string(10 * i) + ".5\n";
  std::vector<std::vector<float>> sides[2];
  for (const std::string name : {"reg-a", "reg-b"}) {
    DatasetCatalog::Upload upload;
    upload.name = name;
    upload.split = "train";
    upload.body_path = catalog.new_staging_path();
    write(upload.body_path, csv);
    const auto ingested = ingest(catalog, upload);
    REQUIRE_MESSAGE(!ingested.error, ingested.error->detail);
    REQUIRE(catalog.get(name)->target_width == 1);
    const auto result = split(name, 0.25, 3);
    REQUIRE_MESSAGE(!result.error, result.error->detail);
    const DatasetRecord r = *catalog.get(name);
    CHECK(r.splits.at("train").examples == 76);
    CHECK(r.splits.at("test").examples == 25);  // round(0.25 x 101)
    // Every example on exactly one side, its target with it.
    std::multiset<int> seen;
    for (SplitKind kind : {SplitKind::kTrain, SplitKind::kTest}) {
      const Split s = catalog.load(name, kind);
      std::vector<float> xs;
      for (uint64_t i = 0; i < s.size; ++i) {
        float x = 0;  // the table's one feature, stored as float32 (and read from its shards)
        const auto id = static_cast<uint32_t>(i);
        s.read_examples({&id, 1}, reinterpret_cast<uint8_t*>(&x));
        CHECK(s.targets[i] == 10 * x + 0.5f);
        seen.insert(static_cast<int>(x));
        xs.push_back(x);
      }
      sides[name == "reg-a" ? 0 : 1].push_back(xs);
    }
    CHECK(seen.size() == 101);
    CHECK(std::set<int>(seen.begin(), seen.end()).size() == 101);
  }
  // The same seed, the same split.
  CHECK(sides[0] == sides[1]);
}

TEST_CASE("DatasetCatalog refuses a dropped-in table whose text_columns do not match its table, naming the column") {
  testing::TempDir dir;
  const std::string uploads = dir.file("uploads"), data = dir.file("data");
  fs::create_directories(uploads);
  fs::create_directories(data);
  const std::unique_ptr<KvStore> kv = KvStore::in_memory();
  {
    DatasetCatalog catalog({data, uploads, 1 << 20, {}}, *kv, [](const std::string&) { return std::vector<std::string>{}; });
    catalog.wait_idle();
    std::string csv = "stars,review,label\n";
    for (int i = 0; i < 12; ++i) csv += std::to_string(i % 5) + ",the soup was cold number " + std::to_string(i) + "," + std::to_string(i % 2) + "\n";
    DatasetCatalog::Upload upload;
    upload.name = "meals";
    upload.split = "train";
    upload.body_path = catalog.new_staging_path();
    write(upload.body_path, csv);
    const auto result = ingest(catalog, upload);
    REQUIRE_MESSAGE(!result.error, result.error->detail);
  }
  const DatasetManifest stored = read_manifest(uploads + "/meals");
  REQUIRE(stored.splits.at("train").text_columns.size() == 1);
  // Copies dropped into the data directory, each with its manifest changed one way.
  const auto drop = [&](const std::string& name, const std::function<void(ManifestSplit&)>& change) {
    fs::copy(uploads + "/meals", data + "/" + name, fs::copy_options::recursive);
    DatasetManifest m = stored;
    change(m.splits.at("train"));
    write_manifest(data + "/" + name, m);
  };
  drop("same", [](ManifestSplit&) {});
  drop("unlisted", [](ManifestSplit& s) { s.text_columns.clear(); });
  drop("renamed", [](ManifestSplit& s) { s.text_columns[0].first = "comment"; });
  drop("short", [](ManifestSplit& s) { s.text_columns[0].second = {s.shards[0]}; });  // the rows' shard, not cells
  drop("twice", [](ManifestSplit& s) { s.text_columns[0].second.push_back(s.text_columns[0].second[0]); });
  DatasetCatalog catalog({data, uploads + "-other", 1 << 20, {}}, *kv, nullptr);
  catalog.wait_idle();
  CHECK(catalog.get("same")->usable());
  const auto error_of = [&](const std::string& name) { return catalog.get(name)->error; };
  CHECK(error_of("unlisted").find("text_columns [] do not match the table's text columns [review]") != std::string::npos);
  CHECK(error_of("renamed").find("text_columns [comment] do not match the table's text columns [review]") != std::string::npos);
  CHECK(error_of("short").find("not a shard of text cells (column 'review')") != std::string::npos);
  CHECK(error_of("twice").find("text column 'review' has 24 cells for 12 rows") != std::string::npos);
}

TEST_CASE("DatasetCatalog converts a built-in's IDX files into shards in the uploads directory once, or loads them in memory") {
  testing::TempDir dir;
  const std::string data = dir.file("data");
  fs::create_directories(data);
  for (const char* split : {"train", "test"}) {
    for (const char* part : {"images-idx3", "labels-idx1"}) {
      const std::string file = std::string("mnist10k-") + split + "-" + part + "-ubyte.gz";
      fs::copy_file(fs::path(testing::data_dir()) / file, fs::path(data) / file);
    }
  }
  const Split memory = load_split(data, "mnist10k", SplitKind::kTest);
  REQUIRE(memory.size > 0);
  auto same_as_memory = [&](const Split& s) {
    CHECK(s.size == memory.size);
    CHECK(s.shape == memory.shape);
    CHECK(s.num_classes == 10u);
    CHECK(s.labels == memory.labels);
    std::vector<uint32_t> ids(s.size);
    std::iota(ids.begin(), ids.end(), 0u);
    std::vector<uint8_t> bytes(ids.size() * s.example_bytes());
    s.read_examples(ids, bytes.data());
    CHECK(bytes == memory.examples);
  };

  const std::string uploads = dir.file("uploads");
  const auto kv = open_kv(dir.file("state"));
  {
    DatasetCatalog catalog({data, uploads, 1 << 20, {}}, *kv, nullptr);
    catalog.wait_idle();
    const Split stored = catalog.load("mnist10k", SplitKind::kTest);
    REQUIRE(stored.stored != nullptr);
    REQUIRE(stored.store != nullptr);
    CHECK(stored.examples.empty());
    const fs::path cache = fs::path(uploads) / ".pstrain-shards" / "mnist10k";
    CHECK(fs::path(stored.store->dir).parent_path() == cache);
    CHECK(fs::path(stored.store->dir).filename().string().rfind("test-", 0) == 0);
    same_as_memory(stored);
    // Loaded again (a second job), and the train split beside it: one conversion of each.
    CHECK(catalog.load("mnist10k", SplitKind::kTest).store->dir == stored.store->dir);
    CHECK(catalog.load("mnist10k", SplitKind::kTrain).store != nullptr);
    CHECK(std::distance(fs::directory_iterator(cache), fs::directory_iterator()) == 2);
    CHECK(catalog.get("mnist10k").has_value());  // (the cache is not a dataset of its own)
    CHECK_FALSE(catalog.get(".pstrain-shards").has_value());
  }
  {
    // The same files through another path (a symlinked data directory): the same conversion,
    // not a new one that would replace it.
    const std::string link = dir.file("data-link");
    fs::create_directory_symlink(data, link);
    const auto kv_link = open_kv(dir.file("state-link"));
    DatasetCatalog catalog({link, uploads, 1 << 20, {}}, *kv_link, nullptr);
    catalog.wait_idle();
    const Split again = catalog.load("mnist10k", SplitKind::kTest);
    REQUIRE(again.store != nullptr);
    const fs::path cache = fs::path(uploads) / ".pstrain-shards" / "mnist10k";
    CHECK(fs::path(again.store->dir).parent_path() == cache);
    CHECK(std::distance(fs::directory_iterator(cache), fs::directory_iterator()) == 2);
    same_as_memory(again);
  }
  {
    // A cache that cannot be made (a file in its place): the split is loaded into memory.
    const std::string other = dir.file("uploads-other");
    write(other + "/.pstrain-shards", "not a directory");
    const auto kv2 = open_kv(dir.file("state-other"));
    DatasetCatalog catalog({data, other, 1 << 20, {}}, *kv2, nullptr);
    catalog.wait_idle();
    const Split loaded = catalog.load("mnist10k", SplitKind::kTest);
    CHECK(loaded.stored == nullptr);
    CHECK(loaded.store == nullptr);
    CHECK(loaded.examples == memory.examples);
    same_as_memory(loaded);
  }
}
