// The data path from a Split to the engine's input: DataService::fill_batch on the coordinator,
// decode_batch / StepRows on the worker (worker/batch_decode.h, worker/step_rows.h), for float32
// and uint8 datasets of other shapes and class counts than the built-in ones; malformed batches
// failing the call; DataService's split loader and forget(); and a split stored as shards
// streaming the batches its copy in memory streams.
#include <doctest/doctest.h>
#include <capnp/message.h>
#include <kj/async-io.h>

#include <atomic>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "common/engine/chunk_plan.h"
#include "common/data/dataset.h"
#include "common/data/dataset_formats.h"
#include "common/data/dataset_manifest.h"
#include "common/data/shard_sink.h"
#include <capnp/serialize.h>
#include "common/base/error.h"
#include "coordinator/datasets/data_service.h"
#include "tests/synthetic_data.h"
#include "tests/test_support.h"
#include "worker/batch_decode.h"
#include "worker/input_sparsity.h"
#include "worker/step_rows.h"

using namespace pstrain;

namespace {

// 60 examples of 30 float32 features in 3 classes.
Split float_split() {
  Rng rng(7);
  std::vector<float> w(3 * 30);
  for (float& v : w) v = rng.uniform_float(-1.0f, 1.0f);
  return make_split("features", SplitKind::kTrain,
                    testing::as_parsed(testing::separable_features(rng, w, 60), {30}, Dtype::kFloat32, 3));
}

// 40 uint8 8x8x1 images in 4 classes.
Split image_split() {
  Rng rng(11);
  return make_split("quadrants", SplitKind::kTest,
                    testing::as_parsed(testing::quadrant_images(rng, 40), {8, 8, 1}, Dtype::kUint8, 4));
}

struct Decoded {
  std::vector<float> inputs;
  std::vector<float> labels;  // targets: the class, or the regression values
};

// What the worker makes of the batch of `indices` the coordinator sends.
Decoded round_trip(const Split& split, const std::vector<uint32_t>& indices) {
  capnp::MallocMessageBuilder message;
  auto batch = message.initRoot<proto::Batch>();
  DataService::fill_batch(split, 2, 5, indices, batch);
  const auto reader = batch.asReader();
  CHECK(reader.getEpoch() == 2);
  CHECK(reader.getStep() == 5);
  Decoded d{std::vector<float>(indices.size() * split.example_size(), -1.0f),
            std::vector<float>(indices.size() * split.target_size(), -1.0f)};
  decode_batch(reader, {split.example_size(), split.num_classes, split.target_width}, d.inputs.data(), d.labels.data());
  return d;
}

// What the standalone trainer gathers for the same examples.
Decoded gathered(const Split& split, const std::vector<uint32_t>& indices) {
  Decoded d{std::vector<float>(indices.size() * split.example_size()),
            std::vector<float>(indices.size() * split.target_size())};
  split.gather(indices, d.inputs.data(), d.labels.data());
  return d;
}

void check_bits_equal(const std::vector<float>& a, const std::vector<float>& b) {
  REQUIRE(a.size() == b.size());
  CHECK(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
}

}  // namespace

TEST_CASE("fill_batch -> decode_batch: float32 features and uint8 images arrive exactly as gather makes them") {
  const std::vector<uint32_t> indices = {17, 0, 39, 3, 3};
  for (const Split& split : {float_split(), image_split()}) {
    CAPTURE(split.dataset);
    const Decoded sent = round_trip(split, indices), local = gathered(split, indices);
    check_bits_equal(sent.inputs, local.inputs);
    CHECK(sent.labels == local.labels);
    for (size_t i = 0; i < indices.size(); ++i) CHECK(sent.labels[i] == static_cast<float>(split.labels[indices[i]]));
  }
  // Float values travel as they are.
  const Split f = float_split();
  float first;
  std::memcpy(&first, f.examples.data() + 17 * f.example_bytes(), sizeof first);
  CHECK(round_trip(f, {17}).inputs[0] == first);
  // An empty slice (a sync step with no examples for this worker) is a valid batch.
  CHECK(round_trip(f, {}).inputs.empty());
}

TEST_CASE("labels past 255 survive the wire") {
  testing::Examples e;
  e.inputs = {0.5f, 0.25f, 1.0f, 0.0f, 0.75f, 0.125f};
  e.labels = {256, 9999, 4242};
  const Split split = make_split("many-classes", SplitKind::kTrain, testing::as_parsed(e, {2}, Dtype::kFloat32, kMaxClasses));
  CHECK(round_trip(split, {2, 0, 1}).labels == std::vector<float>{4242, 256, 9999});
}

TEST_CASE("regression targets travel as they are and arrive as gather makes them") {
  ParsedExamples p;
  p.shape = {2};
  p.dtype = Dtype::kFloat32;
  const std::vector<float> x = {0.5f, 0.25f, 1.0f, 0.0f, 0.75f, 0.125f};
  p.bytes.resize(x.size() * sizeof(float));
  std::memcpy(p.bytes.data(), x.data(), p.bytes.size());
  p.targets = {1.5f, -2.0f, 3.25e7f, 0.1f, -1e-30f, 7.0f};  // two per example
  p.target_width = 2;
  const Split split = make_split("two-targets", SplitKind::kTrain, std::move(p));
  REQUIRE(split.regression());
  const std::vector<uint32_t> indices = {2, 0, 2, 1};
  const Decoded sent = round_trip(split, indices), local = gathered(split, indices);
  check_bits_equal(sent.labels, local.labels);
  CHECK(sent.labels == std::vector<float>{-1e-30f, 7.0f, 1.5f, -2.0f, -1e-30f, 7.0f, 3.25e7f, 0.1f});
  // A target count that does not match, or a target that is not finite, fails the call.
  capnp::MallocMessageBuilder message;
  auto batch = message.initRoot<proto::Batch>();
  DataService::fill_batch(split, 0, 0, {0, 1}, batch);
  std::vector<float> inputs(4), targets(4);
  const BatchShape shape{2, 0, 2};
  CHECK_NOTHROW(decode_batch(batch.asReader(), shape, inputs.data(), targets.data()));
  batch.getTargets().set(3, std::nanf(""));
  CHECK_THROWS_AS(decode_batch(batch.asReader(), shape, inputs.data(), targets.data()), kj::Exception);
  batch.initTargets(3);
  CHECK_THROWS_AS(decode_batch(batch.asReader(), shape, inputs.data(), targets.data()), kj::Exception);
  // A target that is not finite never gets into a split.
  ParsedExamples bad;
  bad.shape = {1};
  bad.bytes.resize(sizeof(float));
  bad.targets = {std::numeric_limits<float>::infinity()};
  bad.target_width = 1;
  CHECK_THROWS_AS(make_split("bad", SplitKind::kTrain, std::move(bad)), DataError);
}

TEST_CASE("zero-feature detection on float batches: a feature is skipped only when exactly 0 in every example") {
  ModelSpec m;
  m.input_shape = {30};
  m.seed = 1;
  LayerSpec hidden, out;
  hidden.units = 200;
  out.units = 3;
  m.layers = {hidden, out};
  const ParamLayout layout = make_param_layout(m);
  const std::vector<ChunkInfo> chunks = plan_chunks(layout, 1);
  const InputSparsity sparsity(m, layout, chunks);
  REQUIRE(sparsity.active());

  // Features 0..9 zero everywhere (some as -0), feature 10 nonzero only in the last example (a
  // denormal), feature 11 NaN once; the rest from the data.
  testing::Examples e;
  Rng rng(3);
  for (int i = 0; i < 4; ++i) {
    e.labels.push_back(i % 3);
    for (int j = 0; j < 30; ++j) {
      float v = rng.uniform_float(0.5f, 1.0f);
      if (j < 10) v = (i + j) % 2 ? -0.0f : 0.0f;
      if (j == 10) v = i == 3 ? std::numeric_limits<float>::denorm_min() : 0.0f;
      if (j == 11) v = i == 1 ? std::numeric_limits<float>::quiet_NaN() : 0.0f;
      e.inputs.push_back(v);
    }
  }
  const Split split = make_split("sparse", SplitKind::kTrain, testing::as_parsed(e, {30}, Dtype::kFloat32, 3));
  capnp::MallocMessageBuilder message;
  auto batch = message.initRoot<proto::Batch>();
  DataService::fill_batch(split, 0, 0, {0, 1, 2, 3}, batch);
  const BatchExamples examples = checked_examples(batch.asReader(), 30);
  CHECK(examples.dtype == Dtype::kFloat32);
  std::vector<uint8_t> mask;
  sparsity.mark_features(examples.bytes, examples.dtype, examples.count, 30, &mask);
  std::vector<uint8_t> expected(30, 1);
  for (int j = 0; j < 10; ++j) expected[static_cast<size_t>(j)] = 0;
  CHECK(mask == expected);
  // Without the last example, feature 10 is zero too.
  sparsity.mark_features(examples.bytes, examples.dtype, 3, 30, &mask);
  expected[10] = 0;
  CHECK(mask == expected);

  // StepRows plans the push of the touched kernel rows only (rows of 200 values).
  StepRows rows(sparsity, chunks.size());
  DataService::fill_batch(split, 0, 0, {0, 1, 2}, batch);
  rows.plan(batch.asReader(), nullptr);
  size_t pushed = 0, kernel = 0;
  for (size_t k = 0; k < chunks.size(); ++k) {
    if (chunks[k].param != 0) continue;
    kernel += chunks[k].size;
    const InputSparsity::Ranges& push = rows.push(k);
    if (!push) {
      pushed += chunks[k].size;
      continue;
    }
    for (const ChunkRange& r : *push) pushed += r.size;
  }
  CHECK(kernel == 30 * 200);
  CHECK(pushed == 19 * 200);  // features 11..29 (10 is zero in these three; 11 is NaN in one)
}

TEST_CASE("a malformed batch fails the call with a KJ exception, not the process") {
  const Split split = float_split();
  const BatchShape shape{30, 3};
  std::vector<float> inputs(4 * 30);
  std::vector<float> labels(4);
  capnp::MallocMessageBuilder message;
  auto batch = message.initRoot<proto::Batch>();
  const auto refill = [&] { DataService::fill_batch(split, 0, 0, {1, 2, 3}, batch); };
  const auto decode = [&] { decode_batch(batch.asReader(), shape, inputs.data(), labels.data()); };
  refill();
  CHECK_NOTHROW(decode());

  batch.setDtype(proto::DType::UINT8);  // float bytes read as uint8: 4x too many
  CHECK_THROWS_AS(decode(), kj::Exception);
  CHECK_THROWS_AS(checked_examples(batch.asReader(), 30), kj::Exception);
  refill();
  batch.setDtype(static_cast<proto::DType>(7));  // a dtype this build does not know
  CHECK_THROWS_AS(decode(), kj::Exception);
  refill();
  batch.setExampleSize(29);
  CHECK_THROWS_AS(decode(), kj::Exception);
  CHECK_THROWS_AS(decode_batch(batch.asReader(), {29, 3}, inputs.data(), labels.data()), kj::Exception);  // bytes
  refill();
  batch.setSize(4);
  CHECK_THROWS_AS(decode(), kj::Exception);
  refill();
  batch.getLabels().set(1, 3);  // outside the model's 3 classes
  CHECK_THROWS_AS(decode(), kj::Exception);
  refill();
  batch.getLabels().set(1, -1);
  CHECK_THROWS_AS(decode(), kj::Exception);
  refill();
  batch.initLabels(2);
  CHECK_THROWS_AS(decode(), kj::Exception);
  // A model of another input size (the images') rejects the float batch.
  refill();
  CHECK_THROWS_AS(decode_batch(batch.asReader(), {64, 4}, inputs.data(), labels.data()), kj::Exception);
  try {
    decode_batch(batch.asReader(), {64, 4}, inputs.data(), labels.data());
  } catch (const kj::Exception& e) {
    CHECK(std::string(e.getDescription().cStr()).find("model's input size") != std::string::npos);
  }
}

TEST_CASE("DataService takes its splits from the owner's loader, once, until forget()") {
  auto io = kj::setupAsyncIo();
  std::atomic<int> calls{0};
  DataService data([&calls](const std::string& dataset, SplitKind kind) {
    ++calls;
    if (dataset != "features") throw DataError("no dataset '" + dataset + "'");
    Split s = float_split();
    s.kind = kind;
    return s;
  });
  const auto a = data.load("features", SplitKind::kTrain).wait(io.waitScope);
  CHECK(a->dtype == Dtype::kFloat32);
  CHECK(a->example_shape() == Shape{30});
  CHECK(data.load("features", SplitKind::kTrain).wait(io.waitScope).get() == a.get());
  CHECK(calls == 1);
  CHECK(data.load("features", SplitKind::kTest).wait(io.waitScope)->kind == SplitKind::kTest);
  CHECK(calls == 2);
  CHECK(testing::failure_of(data.load("gone", SplitKind::kTrain), io.waitScope) == "no dataset 'gone'");

  // Replaced: the next load reads again; a job holding the old split keeps it.
  data.forget("features");
  const auto b = data.load("features", SplitKind::kTrain).wait(io.waitScope);
  CHECK(calls == 4);
  CHECK(b.get() != a.get());
  CHECK(a->size == 60);
  // Forgotten while loading: the load in flight still answers, but is not kept.
  data.forget("features");
  auto in_flight = data.load("features", SplitKind::kTest);
  data.forget("features");
  auto fresh = data.load("features", SplitKind::kTest);
  const auto c = in_flight.wait(io.waitScope), d = fresh.wait(io.waitScope);
  CHECK(c->size == 60);
  CHECK(d.get() != c.get());
  CHECK(calls == 6);
  // A failed load forgotten before it failed does not mark a later load of the same key failed.
  auto failing = data.load("gone", SplitKind::kTrain);
  data.forget("gone");
  CHECK(testing::failure_of(kj::mv(failing), io.waitScope) == "no dataset 'gone'");
  CHECK(calls == 7);
}

TEST_CASE("a split stored as shards streams, from the reading thread, the batches its copy in memory streams") {
  testing::TempDir dir;
  Split memory = float_split();
  {
    ShardLimits limits;
    limits.max_examples = 7;  // batches cross shards
    ShardSink sink(dir.path(), "train", limits);
    sink.begin({30}, Dtype::kFloat32);
    sink.examples(memory.examples.data(), memory.examples.size());
    sink.labels(memory.labels.data(), memory.labels.size());
    DatasetManifest m;
    ManifestSplit s;
    s.format = ManifestSplit::Format::kShards;
    for (const ShardInfo& info : sink.finish(0)) s.shards.push_back(info.file);
    s.shape = {30};
    s.dtype = Dtype::kFloat32;
    m.splits["train"] = s;
    write_manifest(dir.path(), m);
  }
  auto io = kj::setupAsyncIo();
  DataService data([&](const std::string&, SplitKind) { return load_directory_split(dir.path(), "features", SplitKind::kTrain); });
  const auto stored = data.load("features", SplitKind::kTrain).wait(io.waitScope);
  REQUIRE(stored->stored);
  const auto in_memory = std::make_shared<const Split>(std::move(memory));
  const DataPlan plan(ShardPolicy::kData, TrainingMode::kSync, 60, 8, 2, 41);
  // Every batch of both streams (calls of 3 batches, two calls in flight at once) as their bytes.
  auto drain = [&](proto::DataStream::Client stream) {
    std::vector<std::string> batches;
    bool end = false;
    while (!end) {
      auto first = stream.nextRequest();
      first.setMaxBatches(3);
      auto second = stream.nextRequest();
      second.setMaxBatches(3);
      auto a = first.send(), b = second.send();
      for (auto* call : {&a, &b}) {
        auto reply = call->wait(io.waitScope);
        for (auto batch : reply.getBatches()) {
          capnp::MallocMessageBuilder copy;
          copy.setRoot(batch);
          auto words = capnp::messageToFlatArray(copy);
          batches.emplace_back(reinterpret_cast<const char*>(words.begin()), words.size() * sizeof(capnp::word));
        }
        end = end || reply.getEnd();
      }
    }
    return batches;
  };
  for (uint32_t worker = 0; worker < 2; ++worker) {
    const auto want = drain(data.open_train(in_memory, plan, 1, worker, 0));
    CHECK(want.size() == 8);  // 60 examples, global batch 8: 7 steps and a last one of 4
    CHECK(drain(data.open_train(stored, plan, 1, worker, 0)) == want);
    CHECK(drain(data.open_test(stored, worker, 2, 5)) == drain(data.open_test(in_memory, worker, 2, 5)));
  }
}
