// A split stored as shards loaded as its labels, its examples read from disk on demand
// (common/data/stored_examples.h): whatever is read (gather, read_examples, a validation
// hold-out, many threads at once) is byte for byte what the same split gives in memory; a
// replaced shard is an error naming it, never other examples.
#include "common/data/stored_examples.h"

#include <doctest/doctest.h>

#include <cstring>
#include <filesystem>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

#include "common/base/error.h"
#include "common/base/rng.h"
#include "common/data/dataset_formats.h"
#include "common/data/dataset_manifest.h"
#include "common/data/gather_ahead.h"
#include "common/data/shard_sink.h"
#include "common/data/validation_split.h"
#include "tests/synthetic_data.h"
#include "tests/test_support.h"

namespace pstrain {
namespace {

using testing::TempDir;

// 997 examples of 30 float32 values in 5 classes (an odd size, so shards end mid-batch), in
// memory and written as shards of at most 64 examples to `dir` with a manifest.
Split write_both(const std::string& dir) {
  Rng rng(23);
  std::vector<float> w(5 * 30);
  for (float& v : w) v = rng.uniform_float(-1.0f, 1.0f);
  ParsedExamples parsed = testing::as_parsed(testing::separable_features(rng, w, 997), {30}, Dtype::kFloat32, 5);
  ShardLimits limits;
  limits.max_examples = 64;
  ShardSink sink(dir, "train", limits);
  sink.begin({30}, Dtype::kFloat32);
  sink.examples(parsed.bytes.data(), parsed.bytes.size());
  sink.labels(parsed.labels.data(), parsed.labels.size());
  DatasetManifest m;
  ManifestSplit s;
  s.format = ManifestSplit::Format::kShards;
  for (const ShardInfo& info : sink.finish(0)) s.shards.push_back(info.file);
  s.shape = {30};
  s.dtype = Dtype::kFloat32;
  m.splits["train"] = s;
  write_manifest(dir, m);
  return make_split("f", SplitKind::kTrain, std::move(parsed));
}

std::vector<float> gather_all(const Split& split, const std::vector<uint32_t>& ids) {
  std::vector<float> out(ids.size() * (split.example_size() + 1));
  split.gather(ids, out.data(), out.data() + ids.size() * split.example_size());
  return out;
}

std::vector<uint32_t> random_ids(Rng& rng, uint32_t size, size_t n) {
  std::vector<uint32_t> ids(n);
  for (uint32_t& id : ids) id = static_cast<uint32_t>(rng.uniform_index(size));
  ids.push_back(5);  // and a run across a shard's end
  for (uint32_t i = 60; i < 70; ++i) ids.push_back(i);
  return ids;
}

}  // namespace

TEST_CASE("stored examples - a shards split loads its labels only and reads what memory holds, bit for bit") {
  TempDir dir;
  const Split memory = write_both(dir.path());
  const Split stored = load_directory_split(dir.path(), "f", SplitKind::kTrain);
  REQUIRE(stored.stored);
  CHECK(stored.examples.empty());
  CHECK(stored.store);
  CHECK(stored.store->files.size() == 16);
  CHECK(stored.size == memory.size);
  CHECK(stored.num_classes == 5);
  CHECK(stored.labels == memory.labels);
  Rng rng(3);
  for (int round = 0; round < 20; ++round) {
    const std::vector<uint32_t> ids = random_ids(rng, memory.size, 50);
    const std::vector<float> a = gather_all(memory, ids), b = gather_all(stored, ids);
    CHECK(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
  }

  SUBCASE("a validation hold-out maps its ids onto the same shards") {
    const HeldOut in_memory = hold_out_validation(memory, 0.2, 9);
    const HeldOut on_disk = hold_out_validation(stored, 0.2, 9);
    REQUIRE(on_disk.train.stored);
    REQUIRE(on_disk.validation.stored);
    // Both parts name the shards and the hold-out that cuts them, for workers to cut it again.
    REQUIRE(on_disk.train.store);
    REQUIRE(on_disk.validation.store);
    CHECK(on_disk.train.store->files == stored.store->files);
    CHECK(on_disk.train.store->hold_out.fraction == 0.2);
    CHECK(on_disk.train.store->hold_out.seed == 9u);
    CHECK(on_disk.train.store->hold_out.stored_examples == stored.size);
    CHECK_FALSE(on_disk.train.store->hold_out.validation);
    CHECK(on_disk.validation.store->hold_out.validation);
    CHECK(!in_memory.train.store);
    const HeldOutIds ids = held_out_ids(stored, 0.2, 9);
    CHECK(ids.train.size() == in_memory.train.size);
    CHECK(ids.validation.size() == in_memory.validation.size);
    CHECK(gather_all(memory, ids.validation) == gather_all(in_memory.validation, [&] {
            std::vector<uint32_t> all(in_memory.validation.size);
            std::iota(all.begin(), all.end(), 0u);
            return all;
          }()));
    CHECK(on_disk.train.stored->size() == in_memory.train.size);
    for (const auto& [m, d] : {std::pair{&in_memory.train, &on_disk.train}, std::pair{&in_memory.validation, &on_disk.validation}}) {
      std::vector<uint32_t> ids(m->size);
      for (uint32_t i = 0; i < m->size; ++i) ids[i] = m->size - 1 - i;
      const std::vector<float> a = gather_all(*m, ids), b = gather_all(*d, ids);
      CHECK(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
    }
    // A subset of the subset (ids of ids).
    const Split inner = subset_of(on_disk.train, {0, 2, 4});
    const Split inner_memory = subset_of(in_memory.train, {0, 2, 4});
    CHECK(gather_all(inner, {2, 1, 0}) == gather_all(inner_memory, {2, 1, 0}));
  }

  SUBCASE("four threads reading at once read what one does") {
    std::vector<std::vector<float>> got(4), want(4);
    std::vector<std::vector<uint32_t>> ids(4);
    for (size_t t = 0; t < 4; ++t) {
      ids[t] = random_ids(rng, memory.size, 400);
      want[t] = gather_all(memory, ids[t]);
    }
    std::vector<std::thread> threads;
    for (size_t t = 0; t < 4; ++t) threads.emplace_back([&, t] { got[t] = gather_all(stored, ids[t]); });
    for (auto& th : threads) th.join();
    for (size_t t = 0; t < 4; ++t) CHECK(got[t] == want[t]);
  }

  SUBCASE("a shard replaced after the load is an error naming it, never other examples") {
    const std::string victim = stored.store->dir + "/" + stored.store->files[3];
    std::filesystem::copy_file(stored.store->dir + "/" + stored.store->files[4], victim,
                               std::filesystem::copy_options::overwrite_existing);
    std::vector<uint8_t> out(stored.example_bytes());
    const uint32_t id = 3 * 64 + 1;
    CHECK_THROWS_WITH_AS(stored.read_examples({&id, 1}, out.data()), doctest::Contains(stored.store->files[3].c_str()), DataError);
  }
}

TEST_CASE("gather ahead - batches read on a thread of their own are Split::gather's, in order, and errors reach take()") {
  TempDir dir;
  const Split memory = write_both(dir.path());
  const Split stored = load_directory_split(dir.path(), "f", SplitKind::kTrain);
  Rng rng(41);
  std::vector<std::vector<uint32_t>> batches;
  for (size_t n : {32, 1, 32, 17, 32, 32, 5}) batches.push_back(random_ids(rng, memory.size, n - 1));
  for (const Split* split : {&memory, &stored}) {
    CAPTURE(split == &stored);
    GatherAhead reader(*split, 48);
    reader.start(batches[0]);
    std::vector<float> previous;
    for (size_t k = 0; k < batches.size(); ++k) {
      const GatherAhead::Batch b = reader.take();
      if (k + 1 < batches.size()) reader.start(batches[k + 1]);  // gathered while this one is checked
      const std::vector<uint32_t> ids(b.ids.begin(), b.ids.end());
      REQUIRE(ids == batches[k]);
      const std::vector<float> want = gather_all(*split, ids);
      const size_t values = ids.size() * split->example_size();
      CHECK(std::equal(b.inputs, b.inputs + values, want.begin()));
      CHECK(std::equal(b.targets, b.targets + ids.size(), want.begin() + static_cast<std::ptrdiff_t>(values)));
      if (!previous.empty()) CHECK(previous != want);
      previous = want;
    }
  }
  CHECK_THROWS_AS(GatherAhead(memory, 4).start(batches[0]), Error);  // more than its batch
  GatherAhead idle(memory, 48);
  CHECK_THROWS_AS(idle.take(), Error);  // nothing started
  SUBCASE("a replaced shard: take() throws the read's error naming it; the reader goes on") {
    const Split stored = load_directory_split(dir.path(), "f", SplitKind::kTrain);  // no shard open yet
    std::filesystem::copy_file(stored.store->dir + "/" + stored.store->files[4], stored.store->dir + "/" + stored.store->files[3],
                               std::filesystem::copy_options::overwrite_existing);
    GatherAhead reader(stored, 48);
    const std::vector<uint32_t> bad{3 * 64 + 1}, good{0, 1, 2};
    reader.start(bad);
    CHECK_THROWS_WITH_AS(reader.take(), doctest::Contains(stored.store->files[3].c_str()), DataError);
    reader.start(good);
    const GatherAhead::Batch b = reader.take();
    CHECK(std::equal(b.inputs, b.inputs + 3 * 30, gather_all(memory, good).begin()));
  }
  SUBCASE("destroyed with a gather in flight: it waits for it") {
    GatherAhead reader(stored, 48);
    reader.start(batches[1]);
  }
}

TEST_CASE("stored examples - bad labels and mixed shards fail the load naming the shard") {
  TempDir dir;
  ShardLayout layout;
  layout.example_bytes = 4;
  ShardWriter writer(dir.path(), "train", layout);
  const uint8_t example[4] = {1, 2, 3, 4};
  writer.add(example, 4, 0);
  writer.add(example, 4, -2);
  std::vector<std::string> files;
  for (const ShardInfo& s : writer.finish()) files.push_back(s.file);
  CHECK_THROWS_WITH_AS(load_stored_split(dir.path(), files, {4}, Dtype::kUint8, "b", SplitKind::kTrain),
                       doctest::Contains("label -2 of example 1 is outside [0, "), DataError);
  CHECK_THROWS_WITH_AS(load_stored_split(dir.path(), files, {2}, Dtype::kUint8, "b", SplitKind::kTrain),
                       doctest::Contains("its examples are not the split's (uint8, 2 bytes each)"), DataError);
}

}  // namespace pstrain
