#include <doctest/doctest.h>
#include <zlib.h>

#include <fstream>

#include "common/base/error.h"
#include "common/data/idx.h"
#include "tests/test_support.h"

using pstrain::DataError;
using pstrain::read_idx;
using pstrain::testing::TempDir;

namespace {

std::vector<uint8_t> idx_bytes(uint8_t type, std::vector<uint32_t> dims, size_t values) {
  std::vector<uint8_t> b = {0, 0, type, static_cast<uint8_t>(dims.size())};
  for (uint32_t d : dims) {
    for (int s = 24; s >= 0; s -= 8) b.push_back(static_cast<uint8_t>(d >> s));
  }
  for (size_t i = 0; i < values; ++i) b.push_back(static_cast<uint8_t>(i * 7));
  return b;
}

void write_plain(const std::string& path, const std::vector<uint8_t>& bytes) {
  std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(bytes.data()), static_cast<long>(bytes.size()));
}

void write_gz(const std::string& path, const std::vector<uint8_t>& bytes) {
  gzFile f = gzopen(path.c_str(), "wb");
  gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size()));
  gzclose(f);
}

std::string error_of(const std::string& path, int rank) {
  try {
    read_idx(path, rank);
  } catch (const DataError& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace

TEST_CASE("reads plain and gzip IDX files") {
  TempDir dir;
  const auto bytes = idx_bytes(0x08, {3, 2, 2}, 12);
  write_plain(dir.file("a.idx"), bytes);
  write_gz(dir.file("a.idx.gz"), bytes);
  for (const std::string name : {"a.idx", "a.idx.gz"}) {
    const auto array = read_idx(dir.file(name), 3);
    CHECK(array.dims == std::vector<uint32_t>{3, 2, 2});
    REQUIRE(array.values.size() == 12);
    CHECK(array.values[5] == 35);
  }
}

TEST_CASE("rejects broken IDX files with the file name and the defect") {
  TempDir dir;
  SUBCASE("missing") {
    const auto msg = error_of(dir.file("nope.gz"), 1);
    CHECK(msg.find("nope.gz") != std::string::npos);
    CHECK(msg.find("cannot open") != std::string::npos);
  }
  SUBCASE("truncated values") {
    auto bytes = idx_bytes(0x08, {10, 28, 28}, 10 * 784);
    bytes.resize(bytes.size() - 100);
    write_gz(dir.file("t.gz"), bytes);
    const auto msg = error_of(dir.file("t.gz"), 3);
    CHECK(msg.find("t.gz") != std::string::npos);
    CHECK(msg.find("truncated") != std::string::npos);
  }
  SUBCASE("truncated header") {
    write_plain(dir.file("h"), {0, 0, 8, 3, 0, 0});
    CHECK(error_of(dir.file("h"), 3).find("truncated") != std::string::npos);
  }
  SUBCASE("wrong magic") {
    auto bytes = idx_bytes(0x08, {4}, 4);
    bytes[0] = 0x1f;
    write_plain(dir.file("m"), bytes);
    CHECK(error_of(dir.file("m"), 1).find("wrong magic") != std::string::npos);
  }
  SUBCASE("unsupported value type") {
    write_plain(dir.file("f"), idx_bytes(0x0D, {4}, 16));
    CHECK(error_of(dir.file("f"), 1).find("unsupported IDX value type") != std::string::npos);
  }
  SUBCASE("wrong number of dimensions") {
    write_plain(dir.file("d"), idx_bytes(0x08, {4, 2}, 8));
    const auto msg = error_of(dir.file("d"), 3);
    CHECK(msg.find("wrong number of dimensions: header says 2, expected 3") != std::string::npos);
  }
  SUBCASE("zero dimension") {
    write_plain(dir.file("z"), idx_bytes(0x08, {0}, 0));
    CHECK(error_of(dir.file("z"), 1).find("dimension 0 is zero") != std::string::npos);
  }
  SUBCASE("trailing data") {
    write_plain(dir.file("x"), idx_bytes(0x08, {4}, 5));
    CHECK(error_of(dir.file("x"), 1).find("trailing data") != std::string::npos);
  }
  SUBCASE("absurd dimensions") {
    write_plain(dir.file("big"), idx_bytes(0x08, {100000, 100000, 100000}, 0));
    CHECK(error_of(dir.file("big"), 3).find("more than 4 GiB") != std::string::npos);
  }
}

// Regression (fuzz/datasets_fuzz.cc): a header may claim up to 4 GiB of values; a file that holds
// far fewer must fail as truncated without the claimed size being allocated first. The fuzzer's
// input (2 x 67108867 x 3 = 402,653,202 values claimed, 18 present), then the largest claim.
TEST_CASE("an IDX header claiming more than the file holds is truncated, not allocated") {
  TempDir dir;
  const std::vector<uint8_t> fuzzed = {0x00, 0x00, 0x08, 0x03, 0x00, 0x00, 0x00, 0x02, 0x04, 0x00, 0x00, 0x03,
                                       0x00, 0x00, 0x00, 0x03, 0x00, 0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07,
                                       0x08, 0x09, 0x0a, 0x29, 0x0c, 0x0d, 0x0e, 0x0f, 0x10, 0x11};
  write_plain(dir.file("fuzzed"), fuzzed);
  const std::string msg = error_of(dir.file("fuzzed"), 3);
  CHECK(msg.find("truncated: the values needs 402653202 bytes but the file ends after 18") != std::string::npos);

  // 65536 x 65536 x 1 bytes (4 GiB, the cap) claimed by a 24-byte file.
  write_plain(dir.file("huge"), {0, 0, 8, 3, 0, 1, 0, 0, 0, 1, 0, 0, 0, 0, 0, 1, 1, 2, 3, 4, 5, 6, 7, 8});
  CHECK(error_of(dir.file("huge"), 3).find("the file ends after 8") != std::string::npos);
}
