// The dataset store's shard files (common/data/shard_file.h): what is written reads back, byte for
// byte, across shard boundaries; the bounds cut shards where they say; a damaged, truncated or
// foreign file is an error naming it, never a crash or a wrong example.
#include "common/data/shard_file.h"

#include <doctest/doctest.h>


#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "common/base/crc32c.h"
#include "common/base/error.h"
#include "tests/test_support.h"
#include "common/base/rng.h"

namespace pstrain {
namespace {
namespace fs = std::filesystem;

// A fresh directory, removed with its files at the end.
using testing::TempDir;

std::vector<uint8_t> example_bytes(uint64_t i, size_t n) {
  std::vector<uint8_t> out(n);
  for (size_t k = 0; k < n; ++k) out[k] = static_cast<uint8_t>((i * 131 + k * 7) & 0xFF);
  return out;
}

void flip_byte(const std::string& path, uint64_t offset) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(static_cast<std::streamoff>(offset));
  char c = 0;
  f.read(&c, 1);
  c = static_cast<char>(c ^ 0x10);
  f.seekp(static_cast<std::streamoff>(offset));
  f.write(&c, 1);
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const DataError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("crc32c - extending equals the checksum of the whole, and the table path equals the instruction's") {
  CHECK(crc32c("123456789") == 0xE3069283u);  // the standard check value
  CHECK(crc32c_extend_table(0, "123456789", 9) == 0xE3069283u);
  std::string noise(1000, '\0');
  Rng rng(5);
  for (char& c : noise) c = static_cast<char>(rng.uniform_index(256));
  for (size_t n : {size_t{0}, size_t{1}, size_t{7}, size_t{8}, size_t{9}, size_t{999}, size_t{1000}}) {
    CHECK(crc32c_extend_table(0x1234u, noise.data(), n) == crc32c_extend(0x1234u, noise.data(), n));
  }
  const std::string text = "the quick brown fox jumps over the lazy dog, twice over";
  for (size_t cut = 0; cut <= text.size(); ++cut) {
    CHECK(crc32c_extend(crc32c(text.substr(0, cut)), text.data() + cut, text.size() - cut) == crc32c(text));
  }
}

TEST_CASE("shard files - fixed-size examples with labels round-trip across shards cut by bytes and by count") {
  TempDir dir;
  ShardLayout layout;
  layout.example_bytes = 12;  // three float32 values
  layout.dtype = Dtype::kFloat32;
  layout.labels = LabelKind::kClass;
  ShardLimits limits;
  limits.max_bytes = 12 * 40;  // 40 examples by bytes
  limits.max_examples = 1000;
  SUBCASE("by count") { limits.max_examples = 17; }
  const uint64_t n = 101;
  ShardWriter writer(dir.path(), "train", layout, limits);
  for (uint64_t i = 0; i < n; ++i) writer.add(example_bytes(i, 12).data(), 12, static_cast<int32_t>(i % 7));
  const std::vector<ShardInfo> shards = writer.finish();
  const uint64_t per_shard = std::min<uint64_t>(40, limits.max_examples);
  REQUIRE(shards.size() == (n + per_shard - 1) / per_shard);
  uint64_t id = 0;
  for (size_t s = 0; s < shards.size(); ++s) {
    CHECK(shards[s].file == "train-0000" + std::to_string(s) + ".shard");
    ShardFile file(dir.path() + "/" + shards[s].file);
    CHECK(file.layout() == layout);
    CHECK(file.examples() == shards[s].examples);
    CHECK(file.bytes() == shards[s].bytes);
    CHECK(file.bytes() == fs::file_size(dir.path() + "/" + shards[s].file));
    CHECK(file.crc() == shards[s].crc);
    CHECK_NOTHROW(file.verify());
    std::vector<uint8_t> got;
    for (uint64_t i = 0; i < file.examples(); ++i, ++id) {
      file.read(i, got);
      CHECK(got == example_bytes(id, 12));
      CHECK(file.label(i) == static_cast<int32_t>(id % 7));
    }
    // A run of examples in one read is the same bytes.
    std::vector<uint8_t> run(file.examples() * 12);
    file.read_run(0, file.examples(), run.data());
    CHECK(std::vector<uint8_t>(run.begin(), run.begin() + 12) == example_bytes(id - file.examples(), 12));
  }
  CHECK(id == n);
}

TEST_CASE("shard files - variable-size examples (and empty ones), regression targets, and unlabelled data") {
  TempDir dir;
  SUBCASE("variable-size with targets") {
    ShardLayout layout;
    layout.variable = true;
    layout.labels = LabelKind::kTargets;
    layout.target_width = 2;
    ShardLimits limits;
    limits.max_bytes = 300;
    ShardWriter writer(dir.path(), "x", layout, limits);
    Rng rng(7);
    std::vector<size_t> sizes;
    for (int i = 0; i < 60; ++i) {
      sizes.push_back(i % 9 == 0 ? 0 : static_cast<size_t>(rng.uniform_index(120)));
      const float t[2] = {static_cast<float>(i), -0.5f * static_cast<float>(i)};
      writer.add(example_bytes(static_cast<uint64_t>(i), sizes.back()).data(), sizes.back(), t);
    }
    // An example larger than a shard's bound gets a shard of its own.
    const float big_t[2] = {1, 2};
    writer.add(example_bytes(60, 1000).data(), 1000, big_t);
    sizes.push_back(1000);
    const auto shards = writer.finish();
    CHECK(shards.size() > 2);
    uint64_t id = 0;
    for (const ShardInfo& info : shards) {
      ShardFile file(dir.path() + "/" + info.file);
      CHECK_NOTHROW(file.verify());
      std::vector<uint8_t> got;
      for (uint64_t i = 0; i < file.examples(); ++i, ++id) {
        CHECK(file.example_size(i) == sizes[id]);
        file.read(i, got);
        CHECK(got == example_bytes(id, sizes[id]));
        float t[2];
        file.targets(i, t);
        if (id < 60) {
          CHECK(t[0] == static_cast<float>(id));
          CHECK(t[1] == -0.5f * static_cast<float>(id));
        }
      }
      CHECK_THROWS_AS(file.label(0), DataError);  // targets, not classes
      CHECK_THROWS_AS(file.read_run(0, 1, nullptr), DataError);  // not fixed-size
    }
    CHECK(id == 61);
  }
  SUBCASE("unlabelled") {
    ShardLayout layout;
    layout.example_bytes = 5;
    layout.labels = LabelKind::kNone;
    ShardWriter writer(dir.path(), "u", layout);
    for (int i = 0; i < 10; ++i) writer.add(example_bytes(static_cast<uint64_t>(i), 5).data(), 5);
    CHECK_THROWS_AS(writer.add(example_bytes(0, 5).data(), 5, 3), DataError);
    const auto shards = writer.finish();
    REQUIRE(shards.size() == 1);
    ShardFile file(dir.path() + "/" + shards[0].file);
    CHECK(file.examples() == 10);
    CHECK(fs::file_size(dir.path() + "/" + shards[0].file) == 64 + 50);
  }
}

TEST_CASE("shard files - a wrong-size example, a damaged, truncated or foreign file: errors naming the file") {
  TempDir dir;
  ShardLayout layout;
  layout.example_bytes = 8;
  ShardWriter writer(dir.path(), "d", layout);
  CHECK(error_of([&] { writer.add(example_bytes(0, 7).data(), 7, 1); }).find("has 7 bytes") != std::string::npos);
  for (int i = 0; i < 50; ++i) writer.add(example_bytes(static_cast<uint64_t>(i), 8).data(), 8, i);
  const auto shards = writer.finish();
  const std::string path = dir.path() + "/" + shards[0].file;
  SUBCASE("a flipped byte in the data fails verify, not open") {
    flip_byte(path, 64 + 100);
    ShardFile file(path);
    CHECK(error_of([&] { file.verify(); }).find("checksum mismatch") != std::string::npos);
  }
  SUBCASE("a flipped byte in the labels fails verify") {
    flip_byte(path, 64 + 8 * 50 + 3);
    ShardFile file(path);
    CHECK(error_of([&] { file.verify(); }).find(path) != std::string::npos);
  }
  SUBCASE("truncated") {
    fs::resize_file(path, fs::file_size(path) - 4);
    CHECK(error_of([&] { ShardFile file(path); }).find("do not fill") != std::string::npos);
    fs::resize_file(path, 10);
    CHECK(error_of([&] { ShardFile file(path); }).find("shorter than its header") != std::string::npos);
  }
  SUBCASE("a header that lies about its example count") {
    flip_byte(path, 16);
    CHECK(error_of([&] { ShardFile file(path); }).find(path) != std::string::npos);
  }
  SUBCASE("not a shard file") {
    std::ofstream(path, std::ios::trunc) << std::string(200, 'x');
    CHECK(error_of([&] { ShardFile file(path); }).find("no PSSHARD1 signature") != std::string::npos);
  }
  SUBCASE("missing") {
    CHECK(error_of([&] { ShardFile file(dir.path() + "/none.shard"); }).find("none.shard: cannot open") != std::string::npos);
  }
  SUBCASE("reads past the end") {
    ShardFile file(path);
    std::vector<uint8_t> out;
    CHECK_THROWS_AS(file.read(50, out), DataError);
    std::vector<uint8_t> run(8 * 2);
    CHECK_THROWS_AS(file.read_run(49, 2, run.data()), DataError);
  }
}

}  // namespace pstrain

namespace pstrain {

TEST_CASE("shard files - a file that fails to open leaves no descriptor open") {
  TempDir dir;
  const std::string path = dir.path() + "/bad.shard";
  std::ofstream(path) << std::string(100, 'x');
  auto open_descriptors = [] {
    size_t n = 0;
    for ([[maybe_unused]] const auto& entry : fs::directory_iterator("/proc/self/fd")) ++n;
    return n;
  };
  const size_t before = open_descriptors();
  for (int i = 0; i < 200; ++i) {
    CHECK_THROWS_AS(ShardFile file(path), DataError);
    CHECK_THROWS_AS(ShardFile file(path, ShardFile::Open::kHeader), DataError);
  }
  CHECK(open_descriptors() == before);
}

}  // namespace pstrain
