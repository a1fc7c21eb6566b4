// The backup blob codec (common/storage/chunk_snapshot.h): snapshots round-trip bit for bit, and blobs that
// are not encoded snapshots decode to nullopt. Inputs found by fuzz/snapshot_fuzz.cc are replayed
// here.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <string>

#include "common/storage/chunk_snapshot.h"

using namespace pstrain;

TEST_CASE("chunk snapshots round-trip bit for bit, with and without optimizer slots") {
  ChunkSnapshot c;
  c.key = 7;
  c.version = 123;
  c.values = {1.5f, -0.0f, std::numeric_limits<float>::quiet_NaN(), 3e38f};
  c.optimizer_state.iterations = 9;
  c.optimizer_state.slots.push_back({"m", {0.1f, 0.2f, 0.3f, 0.4f}});
  c.optimizer_state.slots.push_back({"v", {1, 2, 3, 4}});
  const std::string blob = encode_snapshot(c);
  const auto back = decode_snapshot(blob);
  REQUIRE(back.has_value());
  CHECK(back->key == 7);
  CHECK(back->version == 123);
  CHECK(back->optimizer_state.iterations == 9);
  REQUIRE(back->values.size() == 4);
  CHECK(std::memcmp(back->values.data(), c.values.data(), 4 * sizeof(float)) == 0);
  REQUIRE(back->optimizer_state.slots.size() == 2);
  CHECK(back->optimizer_state.slots[1].name == "v");
  CHECK(back->optimizer_state.slots[1].values == c.optimizer_state.slots[1].values);
  CHECK(encode_snapshot(*back) == blob);
}

TEST_CASE("chunk snapshots with workers' compression states round-trip - and without, encode as before") {
  ChunkSnapshot c;
  c.key = 3;
  c.version = 40;
  c.values = {1, 2, 3};
  c.optimizer_state.slots.push_back({"m", {4, 5, 6}});
  const std::string plain = encode_snapshot(c);
  // The layout before worker states: header 28 bytes, values, slot count, one slot.
  CHECK(plain.size() == 28 + 12 + 4 + 4 + 1 + 12);
  c.worker_state[0] = {0.5f, -1.0f, 0.0f, 7.0f};  // residual and a warm-start Q, say
  c.worker_state[1] = {2.0f, 3.0f, 4.0f};
  const std::string blob = encode_snapshot(c);
  CHECK(blob.size() == plain.size() + 4 + (4 + 8 + 16) + (4 + 8 + 12));
  CHECK(blob.compare(0, plain.size(), plain) == 0);
  const auto back = decode_snapshot(blob);
  REQUIRE(back.has_value());
  CHECK(back->worker_state == c.worker_state);
  CHECK(encode_snapshot(*back) == blob);
  REQUIRE(decode_snapshot(plain).has_value());
  CHECK(decode_snapshot(plain)->worker_state.empty());
  for (size_t n = plain.size() + 1; n < blob.size(); ++n) CHECK_FALSE(decode_snapshot(blob.substr(0, n)).has_value());
  // The same worker twice is not a snapshot.
  std::string twice = blob;
  const uint32_t zero = 0;
  std::memcpy(twice.data() + plain.size() + 4 + 4 + 8 + 16, &zero, sizeof zero);
  CHECK_FALSE(decode_snapshot(twice).has_value());
  // Regression (fuzz/snapshot_fuzz.cc): workers out of order decoded, and encoded back in
  // ascending order, so the blob had two forms. Workers 1 then 0 is not a snapshot.
  std::string swapped = blob;
  const uint32_t one = 1;
  std::memcpy(swapped.data() + plain.size() + 4, &one, sizeof one);
  std::memcpy(swapped.data() + plain.size() + 4 + 4 + 8 + 16, &zero, sizeof zero);
  CHECK_FALSE(decode_snapshot(swapped).has_value());
}

TEST_CASE("blobs that are not snapshots decode to nullopt") {
  ChunkSnapshot c;
  c.values = {1, 2};
  c.optimizer_state.slots.push_back({"momentum", {3, 4}});
  const std::string blob = encode_snapshot(c);
  for (size_t n = 0; n < blob.size(); ++n) CHECK_FALSE(decode_snapshot(blob.substr(0, n)).has_value());
  CHECK_FALSE(decode_snapshot(blob + "x").has_value());
  std::string absurd = blob;
  const uint64_t huge = uint64_t{1} << 60;
  std::memcpy(absurd.data() + 20, &huge, sizeof huge);  // the value count
  CHECK_FALSE(decode_snapshot(absurd).has_value());
}

// Regression (fuzz/snapshot_fuzz.cc, UBSan): a chunk of zero values. Its empty vectors have no
// storage, and decoding called memcpy with a null destination (undefined even for zero bytes).
// The fuzzer's input: a header with size 0, then 3 bytes of a 4-byte slot count.
TEST_CASE("a snapshot of zero values decodes, with empty slots") {
  const std::string fuzzed("\x25\x0a\x48\x00\x0a\x0a\x00\x0a\x0a\x00\x00\x00\x00\x00\x00\x00"
                           "\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\xed\x0a\xcc",
                           31);
  CHECK_FALSE(decode_snapshot(fuzzed).has_value());  // the slot count is cut short
  ChunkSnapshot empty;
  empty.key = 1;
  empty.optimizer_state.slots.push_back({"m", {}});
  empty.optimizer_state.slots.push_back({"v", {}});
  const auto back = decode_snapshot(encode_snapshot(empty));
  REQUIRE(back.has_value());
  CHECK(back->values.empty());
  REQUIRE(back->optimizer_state.slots.size() == 2);
  CHECK(back->optimizer_state.slots[0].values.empty());
  CHECK(encode_snapshot(*back) == encode_snapshot(empty));
}
