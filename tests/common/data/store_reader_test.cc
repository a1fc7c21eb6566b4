// A split of the dataset store read by example id (common/data/store_reader.h): any id, in any
// order, reads the example and label written for it, across shards and empty shards; a batch
// reads runs in one go and equals reading one by one; open shards stay within the bound.
#include "common/data/store_reader.h"

#include <doctest/doctest.h>


#include <filesystem>
#include <string>
#include <vector>

#include "common/base/error.h"
#include "tests/test_support.h"
#include "common/base/rng.h"

namespace pstrain {
namespace {
namespace fs = std::filesystem;

using testing::TempDir;

std::vector<uint8_t> example_of(uint64_t id, size_t n) {
  std::vector<uint8_t> out(n);
  for (size_t k = 0; k < n; ++k) out[k] = static_cast<uint8_t>((id * 37 + k * 11 + 5) & 0xFF);
  return out;
}

// `n` examples of `bytes` bytes with label id % 9, `per_shard` a shard.
std::vector<std::string> write_split(const std::string& dir, const std::string& prefix, uint64_t n, size_t bytes,
                                     uint64_t per_shard) {
  ShardLayout layout;
  layout.example_bytes = bytes;
  ShardLimits limits;
  limits.max_examples = per_shard;
  ShardWriter writer(dir, prefix, layout, limits);
  for (uint64_t id = 0; id < n; ++id) writer.add(example_of(id, bytes).data(), bytes, static_cast<int32_t>(id % 9));
  std::vector<std::string> files;
  for (const ShardInfo& s : writer.finish()) files.push_back(s.file);
  return files;
}

}  // namespace

TEST_CASE("store reader - any example by id, in any order, across shards, within the open-shard bound") {
  TempDir dir;
  const std::vector<std::string> files = write_split(dir.path(), "train", 1000, 6, 64);  // 16 shards
  StoreReader reader(dir.path(), files, 3);
  CHECK(reader.size() == 1000);
  CHECK(reader.layout().example_bytes == 6);
  Rng rng(3);
  std::vector<uint8_t> got;
  for (int k = 0; k < 3000; ++k) {
    const uint64_t id = rng.uniform_index(1000);
    reader.read(id, got);
    CHECK(got == example_of(id, 6));
    CHECK(reader.label(id) == static_cast<int32_t>(id % 9));
    CHECK(reader.open_shards() <= 3);
  }
  CHECK(reader.locate(0) == std::pair<size_t, uint64_t>{0, 0});
  CHECK(reader.locate(64) == std::pair<size_t, uint64_t>{1, 0});
  CHECK(reader.locate(999) == std::pair<size_t, uint64_t>{15, 999 - 15 * 64});
  CHECK_THROWS_AS(reader.locate(1000), DataError);
}

TEST_CASE("store reader - a batch equals its examples read one by one, runs and jumps alike") {
  TempDir dir;
  const std::vector<std::string> files = write_split(dir.path(), "train", 300, 10, 50);
  StoreReader reader(dir.path(), files, 2);
  std::vector<uint64_t> ids = {5, 6, 7, 8, 48, 49, 50, 51, 52, 299, 0, 1, 150, 150, 100};
  Rng rng(11);
  for (int k = 0; k < 100; ++k) ids.push_back(rng.uniform_index(300));
  std::vector<uint8_t> bytes;
  std::vector<int32_t> labels;
  std::vector<float> targets;
  reader.read_batch(ids, bytes, labels, targets);
  REQUIRE(bytes.size() == ids.size() * 10);
  REQUIRE(labels.size() == ids.size());
  CHECK(targets.empty());
  for (size_t k = 0; k < ids.size(); ++k) {
    CHECK(std::vector<uint8_t>(bytes.begin() + static_cast<long>(k * 10), bytes.begin() + static_cast<long>(k * 10 + 10)) ==
          example_of(ids[k], 10));
    CHECK(labels[k] == static_cast<int32_t>(ids[k] % 9));
  }
}

TEST_CASE("store reader - by default 64 shards of fixed-size examples stay open, reading labels from the file") {
  TempDir dir;
  const std::vector<std::string> files = write_split(dir.path(), "train", 2000, 4, 20);  // 100 shards
  StoreReader reader(dir.path(), files);
  std::vector<uint64_t> ids;
  Rng rng(5);
  for (int k = 0; k < 4000; ++k) ids.push_back(rng.uniform_index(2000));
  std::vector<uint8_t> bytes;
  std::vector<int32_t> labels;
  std::vector<float> targets;
  reader.read_batch(ids, bytes, labels, targets);
  CHECK(reader.open_shards() == 64);
  for (size_t k = 0; k < ids.size(); ++k) CHECK(labels[k] == static_cast<int32_t>(ids[k] % 9));
  // A shard opened for random reads reads the labels a whole one holds.
  const ShardFile whole(dir.file(files[3])), lean(dir.file(files[3]), ShardFile::Open::kRandom);
  std::vector<uint8_t> a(20 * 4), b(20 * 4);
  whole.read_label_run(0, 20, a.data());
  lean.read_label_run(0, 20, b.data());
  CHECK(a == b);
  CHECK(lean.label(7) == whole.label(7));
  CHECK_THROWS_AS(lean.read_label_run(15, 6, b.data()), DataError);
  CHECK_THROWS_AS(lean.verify_after_data(0), DataError);
}

TEST_CASE("store reader - empty shards, shards of another layout, a header-only shard") {
  TempDir dir;
  std::vector<std::string> files = write_split(dir.path(), "a", 10, 4, 5);
  ShardLayout layout;
  layout.example_bytes = 4;
  ShardWriter empty(dir.path(), "empty", layout);
  CHECK(empty.finish().empty());  // no examples: no shard at all
  const std::vector<std::string> more = write_split(dir.path(), "b", 7, 4, 100);
  files.insert(files.end(), more.begin(), more.end());
  StoreReader reader(dir.path(), files);
  CHECK(reader.size() == 17);
  std::vector<uint8_t> got;
  reader.read(12, got);
  CHECK(got == example_of(2, 4));  // "b"'s third example

  const std::vector<std::string> other = write_split(dir.path(), "c", 3, 8, 100);
  std::vector<std::string> mixed = files;
  mixed.push_back(other[0]);
  CHECK_THROWS_AS(StoreReader(dir.path(), mixed), DataError);

  const ShardFile header(dir.path() + "/" + files[0], ShardFile::Open::kHeader);
  CHECK(header.examples() == 5);
  CHECK_THROWS_AS(header.label(0), DataError);
  CHECK_THROWS_AS(header.read(0, got), DataError);
}

TEST_CASE("store reader - with the recorded CRCs, a shard replaced before the reader maps it or while it is closed is an error") {
  TempDir dir;
  const std::vector<std::string> files = write_split(dir.path(), "train", 300, 4, 100);  // 3 shards
  std::vector<uint32_t> crcs;
  for (const std::string& f : files) crcs.push_back(ShardFile(dir.file(f), ShardFile::Open::kHeader).crc());
  CHECK_THROWS_AS(StoreReader(dir.path(), files, 1, {crcs[0]}), DataError);  // one CRC for three shards
  StoreReader reader(dir.path(), files, 1, crcs);
  std::vector<uint8_t> got;
  reader.read(250, got);  // shard 2 open, the others closed (at most one open)
  CHECK(got == example_of(250, 4));
  // Shard 0 rewritten with other examples of the same layout and count, under the same name.
  {
    TempDir other;
    ShardLayout layout;
    layout.example_bytes = 4;
    ShardLimits limits;
    limits.max_examples = 100;
    ShardWriter writer(other.path(), "x", layout, limits);
    for (uint64_t id = 0; id < 100; ++id) writer.add(example_of(id + 7, 4).data(), 4, 0);
    const std::vector<ShardInfo> written = writer.finish();
    REQUIRE(written.size() == 1);
    fs::copy_file(other.file(written[0].file), dir.file(files[0]), fs::copy_options::overwrite_existing);
  }
  try {
    reader.read(5, got);
    FAIL("a replaced shard was read");
  } catch (const DataError& e) {
    CHECK(std::string(e.what()).find("was replaced") != std::string::npos);
    CHECK(std::string(e.what()).find(files[0]) != std::string::npos);
  }
  CHECK_THROWS_AS(reader.read(5, got), DataError);  // never served afterwards either
  reader.read(150, got);  // the others still read
  CHECK(got == example_of(150, 4));
  CHECK_THROWS_AS(StoreReader(dir.path(), files, 1, crcs), DataError);  // nor mapped again
  StoreReader unchecked(dir.path(), files, 1);  // without CRCs: whatever the files hold
  unchecked.read(5, got);
  CHECK(got == example_of(12, 4));
}

}  // namespace pstrain
