// Datasets into and out of the store's shards (common/data/shard_sink.h, and a manifest's
// {"shards": ...} split): whatever a parser gives, in whatever order (labels first or last,
// examples in odd pieces), the shards load as the same Split as the .npy pair the catalog wrote
// before them (their examples left on disk, read by id); a damaged shard fails the load or the
// streaming read with its name.
#include "common/data/shard_sink.h"

#include <doctest/doctest.h>


#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "common/base/error.h"
#include "tests/test_support.h"
#include "common/data/dataset_manifest.h"

namespace pstrain {
namespace {
namespace fs = std::filesystem;

using testing::TempDir;

// Writes the same parse into an .npy-pair directory and a shards directory (both with manifests)
// through `feed`, which drives a sink as a parser would.
struct TwoForms {
  TempDir npy, shards;
  template <typename Feed>
  void write(Feed feed, const ShardLimits& limits, uint32_t target_width = 0) {
    NpyFileWriter npy_writer(npy.path() + "/train-x.npy", npy.path() + "/train-y.npy");
    ShardSink shard_sink(shards.path(), "train", limits);
    const ExampleSummary summary = feed(npy_writer);
    feed(shard_sink);
    npy_writer.finish();
    DatasetManifest a, b;
    ManifestSplit pair;
    pair.format = ManifestSplit::Format::kNpy;
    pair.x = "train-x.npy";
    pair.y = "train-y.npy";
    a.splits["train"] = pair;
    ManifestSplit sharded;
    sharded.format = ManifestSplit::Format::kShards;
    for (const ShardInfo& s : shard_sink.finish(target_width)) sharded.shards.push_back(s.file);
    shard_count = sharded.shards.size();
    sharded.shape = summary.shape;
    sharded.dtype = summary.dtype;
    b.splits["train"] = sharded;
    write_manifest(npy.path(), a);
    write_manifest(shards.path(), b);
  }
  size_t shard_count = 0;
};

// Every example's bytes, read as a job reads them (from memory, or from the store).
std::vector<uint8_t> all_examples(const Split& split) {
  std::vector<uint32_t> ids(split.size);
  for (uint32_t i = 0; i < split.size; ++i) ids[i] = i;
  std::vector<uint8_t> out(ids.size() * split.example_bytes());
  split.read_examples(ids, out.data());
  return out;
}

void check_same(const Split& a, const Split& b) {
  CHECK(a.size == b.size);
  CHECK(a.shape == b.shape);
  CHECK(a.dtype == b.dtype);
  CHECK(a.num_classes == b.num_classes);
  // (a, a dropped-in array pair, is converted into shards of its own too: converted_split.h)
  CHECK(b.stored);  // the shards' examples stay on disk: only the labels are loaded
  CHECK(b.examples.empty());
  CHECK(all_examples(a) == all_examples(b));
  CHECK(a.labels == b.labels);
  CHECK(a.targets == b.targets);
  CHECK(a.target_width == b.target_width);
}

}  // namespace

TEST_CASE("shard sink - a CSV's parse loads from shards as from the .npy pair, across many shards") {
  TempDir input;
  const std::string csv = input.path() + "/t.csv";
  {
    std::ofstream out(csv);
    out << "a,b,c,label\n";
    for (int i = 0; i < 500; ++i) out << i * 0.5 << "," << -i << "," << (i % 13) / 3.0 << "," << (i * 7) % 5 << "\n";
  }
  TwoForms forms;
  ShardLimits limits;
  limits.max_examples = 64;  // 8 shards
  forms.write(
      [&](ExampleSink& sink) {
        CsvOptions options;
        return stream_csv(file_opener(csv), "t.csv", options, sink);
      },
      limits);
  CHECK(forms.shard_count == 8);
  const Split a = load_directory_split(forms.npy.path(), "t", SplitKind::kTrain);
  const Split b = load_directory_split(forms.shards.path(), "t", SplitKind::kTrain);
  REQUIRE(a.size == 500);
  check_same(a, b);
}

TEST_CASE("shard sink - labels before the examples, examples in odd pieces, regression targets") {
  const std::vector<uint32_t> shape = {3, 2, 1};
  const size_t n = 37, example = 6;
  std::vector<uint8_t> bytes(n * example);
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<uint8_t>((i * 29) & 0xFF);
  auto feed_pieces = [&](ExampleSink& sink) {
    for (size_t at = 0; at < bytes.size();) {
      const size_t piece = std::min<size_t>(bytes.size() - at, 1 + (at * 7) % 11);  // 1 to 11 bytes
      sink.examples(bytes.data() + at, piece);
      at += piece;
    }
  };
  ShardLimits limits;
  limits.max_bytes = 50;  // 8 examples a shard
  const auto uint8_summary = [&] {  // what a parser of these examples reports
    ExampleSummary summary;
    summary.shape = shape;
    summary.dtype = Dtype::kUint8;
    return summary;
  };
  SUBCASE("class labels first") {
    std::vector<int32_t> labels(n);
    for (size_t i = 0; i < n; ++i) labels[i] = static_cast<int32_t>(i % 4);
    TwoForms forms;
    forms.write(
        [&](ExampleSink& sink) {
          sink.begin(shape, Dtype::kUint8);
          sink.labels(labels.data(), labels.size());
          feed_pieces(sink);
          return uint8_summary();
        },
        limits);
    CHECK(forms.shard_count == 5);
    check_same(load_directory_split(forms.npy.path(), "p", SplitKind::kTrain),
               load_directory_split(forms.shards.path(), "p", SplitKind::kTrain));
  }
  SUBCASE("class labels after their examples, in pieces and interleaved: each shard sealed as its labels arrive") {
    std::vector<int32_t> labels(n);
    for (size_t i = 0; i < n; ++i) labels[i] = static_cast<int32_t>((i * 3) % 5);
    TwoForms forms;
    std::vector<size_t> sealed_on_the_way;
    forms.write(
        [&](ExampleSink& sink) {
          sink.begin(shape, Dtype::kUint8);
          // Rows one by one, each row's label right after it (as a table reader could), then check
          // how many shards are whole before finish().
          for (size_t i = 0; i < n; ++i) {
            sink.examples(bytes.data() + i * example, example);
            sink.labels(&labels[i], 1);
          }
          if (dynamic_cast<ShardSink*>(&sink) != nullptr) {
            size_t whole = 0;
            for (const auto& e : fs::directory_iterator(forms.shards.path())) {
              try {
                ShardFile(e.path().string()).verify();
                ++whole;
              } catch (const DataError&) {
              }
            }
            sealed_on_the_way.push_back(whole);
          }
          return uint8_summary();
        },
        limits);
    CHECK(forms.shard_count == 5);
    REQUIRE(sealed_on_the_way.size() == 1);
    CHECK(sealed_on_the_way[0] == 4);  // every closed shard; the open one waits for finish()
    check_same(load_directory_split(forms.npy.path(), "p", SplitKind::kTrain),
               load_directory_split(forms.shards.path(), "p", SplitKind::kTrain));
  }
  SUBCASE("more labels than examples so far are kept until the examples come") {
    std::vector<int32_t> labels(n, 1);
    labels[0] = 0;
    TempDir dir;
    ShardSink sink(dir.path(), "train", limits);
    sink.begin(shape, Dtype::kUint8);
    sink.examples(bytes.data(), 10 * example);
    sink.labels(labels.data(), 5);           // streamed
    sink.labels(labels.data() + 5, n - 5);   // more than the examples so far: kept
    sink.examples(bytes.data() + 10 * example, (n - 10) * example);
    DatasetManifest m;
    ManifestSplit s;
    s.format = ManifestSplit::Format::kShards;
    for (const ShardInfo& info : sink.finish()) s.shards.push_back(info.file);
    s.shape = shape;
    m.splits["train"] = s;
    write_manifest(dir.path(), m);
    const Split split = load_directory_split(dir.path(), "l", SplitKind::kTrain);
    CHECK(split.labels == labels);
    CHECK(all_examples(split) == bytes);
  }
  SUBCASE("regression targets last") {
    std::vector<float> targets(n * 2);
    for (size_t i = 0; i < targets.size(); ++i) targets[i] = static_cast<float>(i) * 0.25f - 3.0f;
    TempDir dir;
    ShardSink sink(dir.path(), "train", limits);
    sink.begin(shape, Dtype::kUint8);
    feed_pieces(sink);
    sink.targets(targets.data(), targets.size());
    DatasetManifest m;
    ManifestSplit s;
    s.format = ManifestSplit::Format::kShards;
    for (const ShardInfo& info : sink.finish(2)) s.shards.push_back(info.file);
    s.shape = shape;
    m.splits["train"] = s;
    write_manifest(dir.path(), m);
    CHECK(read_manifest(dir.path()).splits.at("train").shards == s.shards);
    const Split split = load_directory_split(dir.path(), "r", SplitKind::kTrain);
    CHECK(split.size == n);
    CHECK(split.target_width == 2);
    CHECK(split.targets == targets);
    CHECK(all_examples(split) == bytes);
  }
}

TEST_CASE("shard sink - a damaged shard, a shard of another split, or a bad manifest fail the load naming it") {
  TwoForms forms;
  ShardLimits limits;
  limits.max_examples = 10;
  std::vector<uint8_t> bytes(4 * 30);
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<uint8_t>(i);
  std::vector<int32_t> labels(30);
  for (size_t i = 0; i < labels.size(); ++i) labels[i] = static_cast<int32_t>(i % 3);
  forms.write(
      [&](ExampleSink& sink) {
        sink.begin({4}, Dtype::kUint8);
        sink.examples(bytes.data(), bytes.size());
        sink.labels(labels.data(), labels.size());
        ExampleSummary summary;
        summary.shape = {4};
        summary.dtype = Dtype::kUint8;
        return summary;
      },
      limits);
  const std::string second = forms.shards.path() + "/train-00001.shard";
  auto load_error = [&] {
    try {
      load_directory_split(forms.shards.path(), "d", SplitKind::kTrain);
    } catch (const DataError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  SUBCASE("a flipped byte: streaming the split whole (indexing, a split) names the shard; a load reads labels only") {
    {
      std::fstream f(second, std::ios::in | std::ios::out | std::ios::binary);
      f.seekp(64 + 5);
      f.put('\x7f');
    }
    struct Discard final : ExampleSink {
      void begin(const std::vector<uint32_t>&, ParsedExamples::Dtype) override {}
      void examples(const uint8_t*, size_t) override {}
      void labels(const int32_t*, size_t) override {}
    } discard;
    const DatasetManifest manifest = read_manifest(forms.shards.path());
    CHECK_THROWS_WITH_AS(stream_manifest_split(forms.shards.path(), manifest.splits.at("train"), ExampleLimits{}, discard),
                         doctest::Contains("train-00001.shard: checksum mismatch"), DataError);
    CHECK(load_error().empty());
  }
  SUBCASE("a shard of other examples") {
    ShardLayout other;
    other.example_bytes = 8;
    ShardWriter writer(forms.shards.path(), "other", other);
    writer.add(bytes.data(), 8, 1);
    writer.finish();
    fs::rename(forms.shards.path() + "/other-00000.shard", second);
    CHECK(load_error().find("train-00001.shard: its examples are not the split's") != std::string::npos);
  }
  SUBCASE("a manifest naming a path outside the directory, or without a shape") {
    std::ofstream(forms.shards.path() + "/dataset.json") << R"({"train": {"shards": ["../x.shard"], "shape": [4], "dtype": "uint8"}})";
    CHECK(load_error().find("/train/shards/0 must be a file name") != std::string::npos);
    std::ofstream(forms.shards.path() + "/dataset.json") << R"({"train": {"shards": [], "dtype": "uint8"}})";
    CHECK(load_error().find("/train/shape is required") != std::string::npos);
  }
}

}  // namespace pstrain
