#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <utility>
#include <vector>

#include "common/data/dataset.h"
#include "common/base/error.h"
#include "common/data/job_spec.h"
#include "common/data/spec_reader.h"
#include "common/engine/model_spec.h"
#include "tests/test_support.h"

using namespace pstrain;

namespace {

const char* kMlp = R"({
  "name": "mnist-mlp",
  "dataset": {"name": "mnist10k", "shard_policy": "DATA", "shuffle_seed": 22},
  "model": {"input_shape": [28, 28, 1], "seed": 22, "layers": [
    {"type": "flatten"},
    {"type": "dense", "units": 700, "activation": "relu"},
    {"type": "dense", "units": 500, "activation": "relu"},
    {"type": "dense", "units": 10}
  ]},
  "loss": "sparse_softmax_cross_entropy",
  "optimizer": {"type": "adam", "learning_rate": 0.001, "epsilon": 1e-7},
  "training": {"mode": "sync", "global_batch_size": 128, "epochs": 3, "workers": 2},
  "backup": {"save_freq": "epoch"}
})";

// Replaces the first occurrence of `from` in the MLP spec.
std::string mlp_with(const std::string& from, const std::string& to) {
  std::string s = kMlp;
  const auto at = s.find(from);
  REQUIRE(at != std::string::npos);
  return s.replace(at, from.size(), to);
}

// The error a spec produces against a dataset table: "path detail".
std::string error_of(const std::string& json, const std::vector<DatasetInfo>& datasets = known_datasets()) {
  try {
    parse_job_spec(json, datasets);
  } catch (const SpecError& e) {
    return e.what();
  }
  return "(accepted)";
}

// A reference job of deploy/jobs/, parsed.
JobSpec reference_job(const std::string& file) {
  const std::string path = std::string(PSTRAIN_JOBS_DIR) + "/" + file;
  std::ifstream in(path);
  REQUIRE_MESSAGE(in, path << ": cannot be read");
  std::stringstream text;
  text << in.rdbuf();
  return parse_job_spec(text.str());
}

}  // namespace

TEST_CASE("the docs/JOB-SPEC.md example parses into typed fields") {
  const JobSpec spec = parse_job_spec(kMlp);
  CHECK(spec.name == "mnist-mlp");
  CHECK(spec.dataset.name == "mnist10k");
  CHECK(spec.dataset.shuffle_seed == 22);
  CHECK(spec.model.layers.size() == 4);
  CHECK(spec.model.layers[1].units == 700);
  CHECK(spec.model.layers[1].activation == Activation::kReLU);
  CHECK(spec.optimizer.type == OptimizerType::kAdam);
  CHECK(spec.optimizer.beta_2 == doctest::Approx(0.999));
  CHECK(spec.training.global_batch_size == 128);
  CHECK(spec.training.workers == 2);
  CHECK(spec.backup.frequency == BackupSpec::Frequency::kEpoch);

  const ParamLayout layout = make_param_layout(spec.model);
  REQUIRE(layout.params().size() == 6);
  CHECK(layout.params()[0].name == "layers.1.kernel");
  CHECK(layout.params()[0].shape == Shape{784, 700});
  CHECK(layout.params()[5].name == "layers.3.bias");
  size_t elements = 0;
  for (const auto& p : layout.params()) {
    CHECK(p.offset % ParamLayout::kAlignment == 0);
    CHECK(p.offset >= elements);
    elements = p.offset + p.size;
  }
  CHECK(elements == layout.total_size());
  CHECK(layout.total_size() < 784 * 700 + 700 + 700 * 500 + 500 + 500 * 10 + 10 + 6 * ParamLayout::kAlignment);
}

TEST_CASE("canonical JSON round-trips") {
  const JobSpec spec = parse_job_spec(kMlp);
  const JobSpec again = parse_job_spec(job_spec_to_json(spec));
  CHECK(job_spec_to_json(again) == job_spec_to_json(spec));
  CHECK(again.model.layers[2].units == 500);
  CHECK(again.backup.frequency == BackupSpec::Frequency::kEpoch);
}

TEST_CASE("dataset.shuffle_window: default 2^20, canonical only when set, at least 1") {
  CHECK(parse_job_spec(kMlp).dataset.shuffle_window == kDefaultShuffleWindow);
  CHECK(job_spec_to_json(parse_job_spec(kMlp)).find("shuffle_window") == std::string::npos);
  const JobSpec set = parse_job_spec(mlp_with("\"shuffle_seed\": 22", "\"shuffle_seed\": 22, \"shuffle_window\": 4096"));
  CHECK(set.dataset.shuffle_window == 4096);
  CHECK(parse_job_spec(job_spec_to_json(set)).dataset.shuffle_window == 4096);
  CHECK(error_of(mlp_with("\"shuffle_seed\": 22", "\"shuffle_seed\": 22, \"shuffle_window\": 0")).find("/dataset/shuffle_window") == 0);
}

TEST_CASE("bad specs are rejected naming the field") {
  CHECK(error_of(mlp_with("\"global_batch_size\": 128", "\"global_batch_size\": -1")) ==
        "/training/global_batch_size must be a positive integer (at most 65536)");
  CHECK(error_of(mlp_with("\"global_batch_size\": 128", "\"global_batch_size\": \"128\"")) ==
        "/training/global_batch_size must be a positive integer (at most 65536), not a string");
  CHECK(error_of(mlp_with("\"global_batch_size\": 128", "\"global_batch_size\": 1.5")) ==
        "/training/global_batch_size must be a positive integer (at most 65536), not a number");
  CHECK(error_of(mlp_with("\"units\": 700", "\"units\": 0")) == "/model/layers/1/units must be a positive integer (at most 16777216)");
  CHECK(error_of(mlp_with(", \"units\": 700", "")) == "/model/layers/1/units is required");
  CHECK(error_of(mlp_with("\"type\": \"flatten\"", "\"type\": \"capsule\"")).find("/model/layers/0/type must be one of") == 0);
  CHECK(error_of(mlp_with("\"learning_rate\": 0.001", "\"learning_rat\": 0.001")).find("/optimizer/learning_rat is not a known field") == 0);
  CHECK(error_of(mlp_with("\"name\": \"mnist-mlp\"", "\"nmae\": 1")).find("/nmae is not a known field") == 0);
  CHECK(error_of(mlp_with("\"mnist10k\"", "\"cifar10\"")) ==
        "/dataset/name \"cifar10\" is not a known dataset (known: mnist10k, fashion, fashion-mnist)");
  CHECK(error_of(mlp_with("\"type\": \"adam\"", "\"type\": \"nadam\"")) ==
        "/optimizer/type must be one of \"sgd\", \"adam\", \"adamw\", \"adagrad\", \"rmsprop\", not \"nadam\"");
  CHECK(error_of(mlp_with("\"workers\": 2", "\"workers\": 0")) == "/training/workers must be a positive integer (at most 256)");
  CHECK(error_of(mlp_with("\"save_freq\": \"epoch\"", "\"save_freq\": \"hourly\"")) ==
        "/backup/save_freq must be \"epoch\" or a positive integer (steps)");
  CHECK(error_of(mlp_with("\"learning_rate\": 0.001", "\"learning_rate\": -1")) ==
        "/optimizer/learning_rate must be a number greater than 0 and at most 1000");
}

TEST_CASE("shapes that do not fit are rejected at the layer that breaks") {
  // dense straight on an image
  CHECK(error_of(mlp_with("{\"type\": \"flatten\"},", "")).find("/model/layers/0/type dense needs a flat input") == 0);
  // last layer must emit one logit per class
  CHECK(error_of(mlp_with("{\"type\": \"dense\", \"units\": 10}", "{\"type\": \"dense\", \"units\": 7}")) ==
        "/model/layers/3 must output 10 logits (the classes of mnist10k) but outputs [7]");
  // a conv kernel larger than its input
  const std::string conv = R"({"dataset": {"name": "fashion"}, "model": {"input_shape": [28, 28, 1], "layers": [
      {"type": "conv2d", "filters": 4, "kernel_size": 3}, {"type": "maxpool2d"}, {"type": "maxpool2d"},
      {"type": "maxpool2d"}, {"type": "conv2d", "filters": 4, "kernel_size": 5}, {"type": "flatten"},
      {"type": "dense", "units": 10}]}, "optimizer": {"type": "sgd"}, "training": {"global_batch_size": 8}})";
  CHECK(error_of(conv) == "/model/layers/4/kernel_size [5, 5] does not fit the input [3, 3, 4]");
  CHECK(error_of(mlp_with("\"input_shape\": [28, 28, 1]", "\"input_shape\": [32, 32, 3]")) ==
        "/model/input_shape [32, 32, 3] does not match mnist10k's 28x28x1 images");
  CHECK(error_of(mlp_with("{\"type\": \"flatten\"}", "{\"type\": \"reshape\", \"target_shape\": [700, 2]}")) ==
        "/model/layers/0/target_shape has 1400 elements but the input [28, 28, 1] has 784");
  CHECK(error_of(mlp_with("\"units\": 700", "\"units\": 16000000")).find("/model/layers/1 brings the model over 2^28 parameters") == 0);
}

namespace {

// A CNN on fashion's 28x28x1 images whose first layers are given.
std::string cnn_with(const std::string& first_layers) {
  return R"({"dataset": {"name": "fashion"}, "model": {"input_shape": [28, 28, 1], "layers": [)" + first_layers +
         R"(, {"type": "flatten"}, {"type": "dense", "units": 10}]}, "optimizer": {"type": "sgd"},
         "training": {"global_batch_size": 8}})";
}

}  // namespace

TEST_CASE("conv2d strides and padding, maxpool2d pool_size and strides") {
  const JobSpec spec = parse_job_spec(cnn_with(R"(
      {"type": "conv2d", "filters": 4, "kernel_size": [3, 5], "strides": [2, 1], "padding": "same"},
      {"type": "maxpool2d", "pool_size": 3, "strides": 2},
      {"type": "maxpool2d", "pool_size": [2, 1], "strides": 1},
      {"type": "conv2d", "filters": 2, "kernel_size": 2, "strides": 2})"));
  const LayerSpec& conv = spec.model.layers[0];
  CHECK(conv.padding == Padding::kSame);
  CHECK(layer_strides(conv) == std::array<int64_t, 2>{2, 1});
  CHECK(spec.model.layers[1].pool_size == std::array<int64_t, 2>{3, 3});
  CHECK(layer_strides(spec.model.layers[1]) == std::array<int64_t, 2>{2, 2});
  CHECK(spec.model.layers[2].pool_size == std::array<int64_t, 2>{2, 1});
  CHECK(layer_strides(spec.model.layers[2]) == std::array<int64_t, 2>{1, 1});
  CHECK(spec.model.layers[3].padding == Padding::kValid);
  const std::vector<Shape> shapes = infer_shapes(spec.model);
  CHECK(shapes[0] == Shape{14, 28, 4});  // ceil(28 / 2), ceil(28 / 1)
  CHECK(shapes[1] == Shape{6, 13, 4});   // floor((14 - 3) / 2) + 1, floor((28 - 3) / 2) + 1
  CHECK(shapes[2] == Shape{5, 13, 4});
  CHECK(shapes[3] == Shape{2, 6, 2});

  // The canonical form keeps the options that differ from their defaults and round-trips.
  const std::string canonical = job_spec_to_json(spec);
  CHECK(canonical.find(R"("strides":[2,1],)") != std::string::npos);
  CHECK(canonical.find(R"("padding":"same")") != std::string::npos);
  CHECK(canonical.find(R"("pool_size":[3,3])") != std::string::npos);
  CHECK(canonical.find(R"("pool_size":[2,1],"strides":[1,1])") != std::string::npos);
  const JobSpec again = parse_job_spec(canonical);
  CHECK(job_spec_to_json(again) == canonical);
  CHECK(layer_strides(again.model.layers[1]) == std::array<int64_t, 2>{2, 2});
  CHECK(infer_shapes(again.model) == shapes);
}

TEST_CASE("window options at their defaults leave the canonical form as it was") {
  const std::string plain = job_spec_to_json(parse_job_spec(cnn_with(
      R"({"type": "conv2d", "filters": 4, "kernel_size": 3}, {"type": "maxpool2d"}, {"type": "maxpool2d", "pool_size": 3})")));
  const std::string spelled = job_spec_to_json(parse_job_spec(cnn_with(
      R"({"type": "conv2d", "filters": 4, "kernel_size": 3, "strides": [1, 1], "padding": "valid"},
         {"type": "maxpool2d", "pool_size": [2, 2], "strides": 2}, {"type": "maxpool2d", "pool_size": 3, "strides": 3})")));
  CHECK(spelled == plain);
  CHECK(plain.find("strides") == std::string::npos);
  CHECK(plain.find("padding") == std::string::npos);
}

TEST_CASE("bad window options are rejected naming the field") {
  const std::string conv = R"({"type": "conv2d", "filters": 4, "kernel_size": 3, )";
  CHECK(error_of(cnn_with(conv + R"("padding": "full"})")) ==
        "/model/layers/0/padding must be one of \"valid\", \"same\", not \"full\"");
  CHECK(error_of(cnn_with(conv + R"("padding": 1})")) ==
        "/model/layers/0/padding must be one of \"valid\", \"same\", not an integer");
  CHECK(error_of(cnn_with(conv + R"("strides": 0})")) ==
        "/model/layers/0/strides must be a positive integer (at most 4096)");
  CHECK(error_of(cnn_with(conv + R"("strides": [2, 0]})")) ==
        "/model/layers/0/strides/1 must be a positive integer (at most 4096)");
  CHECK(error_of(cnn_with(conv + R"("strides": [2, 2, 2]})")) ==
        "/model/layers/0/strides must be a positive integer or an array [height, width]");
  CHECK(error_of(cnn_with(conv + R"("strides": "2"})")) ==
        "/model/layers/0/strides must be a positive integer or an array [height, width]");
  CHECK(error_of(cnn_with(R"({"type": "maxpool2d", "pool_size": 0})")) ==
        "/model/layers/0/pool_size must be a positive integer (at most 4096)");
  CHECK(error_of(cnn_with(R"({"type": "maxpool2d", "strides": [1, -1]})")) ==
        "/model/layers/0/strides/1 must be a positive integer (at most 4096)");
  CHECK(error_of(cnn_with(R"({"type": "maxpool2d", "pool_size": [29, 2]})")) ==
        "/model/layers/0/pool_size maxpool2d's [29, 2] window does not fit the input [28, 28, 1]");
  CHECK(error_of(cnn_with(R"({"type": "maxpool2d", "padding": "valid"})")).find(
            "/model/layers/0/padding is not a known field") == 0);
  CHECK(error_of(cnn_with(R"({"type": "dense", "units": 3, "strides": 1})")).find(
            "/model/layers/0/strides is not a known field") == 0);
  // valid padding needs the kernel to fit; same padding pads the input for it
  CHECK(error_of(cnn_with(R"({"type": "conv2d", "filters": 2, "kernel_size": 29})")) ==
        "/model/layers/0/kernel_size [29, 29] does not fit the input [28, 28, 1]");
  CHECK(error_of(cnn_with(R"({"type": "conv2d", "filters": 2, "kernel_size": 29, "padding": "same"})")) == "(accepted)");
}

TEST_CASE("text that is not JSON is a malformed-kind error") {
  for (const std::string text : {"", "{", "{\"dataset\": }", "[1, 2", "\xff\xfe{}", "{\"a\": \"\xc3\x28\"}"}) {
    try {
      parse_job_spec(text);
      FAIL("accepted: " << text);
    } catch (const SpecError& e) {
      CHECK(e.kind() == SpecError::Kind::kMalformed);
    }
  }
  try {
    parse_job_spec("[1, 2]");
    FAIL("accepted an array");
  } catch (const SpecError& e) {
    CHECK(e.kind() == SpecError::Kind::kInvalid);
    CHECK(std::string(e.what()) == "/ must be an object, not an array");
  }
}

TEST_CASE("the reference jobs parse") {
  CHECK(testing::mlp_job(700, 10, 3).model.layers[2].units == 10);
  CHECK(testing::fashion_cnn_job(1).model.layers.size() == 7);
}

TEST_CASE("a spec the coordinator accepted parses without the dataset table - everything else is still checked") {
  const std::string catalog = mlp_with("\"mnist10k\"", "\"from-the-catalog\"");
  CHECK(error_of(catalog).find("is not a known dataset") != std::string::npos);
  CHECK(parse_accepted_job_spec(catalog).dataset.name == "from-the-catalog");
  CHECK_THROWS_AS(parse_accepted_job_spec(mlp_with("\"global_batch_size\": 128", "\"global_batch_size\": -1")),
                  SpecError);
}

TEST_CASE("every known dataset name is accepted, fashion-mnist included") {
  CHECK(error_of(mlp_with("\"mnist10k\"", "\"fashion\"")) == "(accepted)");
  CHECK(parse_job_spec(mlp_with("\"mnist10k\"", "\"fashion-mnist\"")).dataset.name == "fashion-mnist");
}

TEST_CASE("the fashion-mnist reference job is the Fashion CNN on the official split") {
  const JobSpec official = reference_job("fashion-mnist-cnn.json");
  const JobSpec resplit = reference_job("fashion-cnn.json");
  CHECK(official.name == "fashion-mnist-cnn");
  CHECK(official.dataset.name == "fashion-mnist");
  CHECK(resplit.dataset.name == "fashion");
  // Only the name and the dataset differ.
  JobSpec renamed = official;
  renamed.name = resplit.name;
  renamed.dataset.name = resplit.dataset.name;
  CHECK(job_spec_to_json(renamed) == job_spec_to_json(resplit));
}

namespace {

// Datasets of other shapes: 8x8 single-channel images in 4 classes, and 30 flat features in 3 classes.
const std::vector<DatasetInfo> kOtherDatasets = {
    {"tiles", "", "tiles-train", "tiles-test", 4, "", "", {8, 8, 1}},
    {"features", "", "features-train", "features-test", 3, "", "", {30}},
};

std::string spec_on(const std::string& dataset, const std::string& input_shape, const std::string& layers) {
  return R"({"dataset": {"name": ")" + dataset + R"("}, "model": {"input_shape": )" + input_shape +
         R"(, "layers": [)" + layers + R"(]}, "optimizer": {"type": "sgd"}, "training": {"global_batch_size": 8}})";
}

// The tensors of a model with their shapes, and its parameter count (without alignment padding).
std::vector<std::pair<std::string, Shape>> tensors(const ModelSpec& model) {
  std::vector<std::pair<std::string, Shape>> out;
  const ParamLayout layout = make_param_layout(model);
  for (const ParamInfo& p : layout.params()) out.emplace_back(p.name, p.shape);
  return out;
}

int64_t parameter_count(const ModelSpec& model) {
  int64_t n = 0;
  const ParamLayout layout = make_param_layout(model);
  for (const ParamInfo& p : layout.params()) n += num_elements(p.shape);
  return n;
}

}  // namespace

TEST_CASE("input shapes other than 28x28x1 and class counts other than 10 parse with their shapes") {
  SUBCASE("an 8x8x1 image dataset with 4 classes") {
    const JobSpec spec = parse_job_spec(
        spec_on("tiles", "[8, 8, 1]",
                R"({"type": "conv2d", "filters": 3, "kernel_size": 3}, {"type": "flatten"}, {"type": "dense", "units": 4})"),
        kOtherDatasets);
    CHECK(spec.model.input_shape == Shape{8, 8, 1});
    const std::vector<Shape> shapes = infer_shapes(spec.model);
    CHECK(shapes == std::vector<Shape>{{6, 6, 3}, {108}, {4}});
    CHECK(tensors(spec.model) == std::vector<std::pair<std::string, Shape>>{{"layers.0.kernel", {3, 3, 1, 3}},
                                                                              {"layers.0.bias", {3}},
                                                                              {"layers.2.kernel", {108, 4}},
                                                                              {"layers.2.bias", {4}}});
    CHECK(parameter_count(spec.model) == (3 * 3 * 1 * 3 + 3) + (108 * 4 + 4));
    // Its flat form [64] is accepted too.
    CHECK(error_of(spec_on("tiles", "[64]", R"({"type": "dense", "units": 4})"), kOtherDatasets) == "(accepted)");
  }
  SUBCASE("30 flat features with 3 classes") {
    const JobSpec spec = parse_job_spec(
        spec_on("features", "[30]", R"({"type": "dense", "units": 16, "activation": "relu"}, {"type": "dense", "units": 3})"),
        kOtherDatasets);
    CHECK(spec.model.input_shape == Shape{30});
    CHECK(infer_shapes(spec.model) == std::vector<Shape>{{16}, {3}});
    CHECK(parameter_count(spec.model) == 30 * 16 + 16 + 16 * 3 + 3);
    // The canonical text names the shape and parses again against the same datasets.
    CHECK(parse_job_spec(job_spec_to_json(spec), kOtherDatasets).model.input_shape == Shape{30});
  }
  SUBCASE("a known image dataset accepts its images flat") {
    CHECK(error_of(mlp_with("\"input_shape\": [28, 28, 1], \"seed\": 22, \"layers\": [\n    {\"type\": \"flatten\"},",
                            "\"input_shape\": [784], \"seed\": 22, \"layers\": [")) == "(accepted)");
  }
}

TEST_CASE("a spec that does not fit its dataset is rejected naming the field and both sides") {
  CHECK(error_of(spec_on("features", "[31]", R"({"type": "dense", "units": 3})"), kOtherDatasets) ==
        "/model/input_shape [31] does not match features's [30] features");
  CHECK(error_of(spec_on("tiles", "[8, 8, 2]", R"({"type": "flatten"}, {"type": "dense", "units": 4})"),
                 kOtherDatasets) == "/model/input_shape [8, 8, 2] does not match tiles's 8x8x1 images");
  CHECK(error_of(spec_on("features", "[30]", R"({"type": "dense", "units": 8}, {"type": "dense", "units": 5})"),
                 kOtherDatasets) == "/model/layers/1 must output 3 logits (the classes of features) but outputs [5]");
  CHECK(error_of(mlp_with("\"input_shape\": [28, 28, 1]", "\"input_shape\": [30]")) ==
        "/model/input_shape [30] does not match mnist10k's 28x28x1 images");
  CHECK(error_of(spec_on("mnist10k", "[784]", R"({"type": "dense", "units": 3})"), kOtherDatasets) ==
        "/dataset/name \"mnist10k\" is not a known dataset (known: tiles, features)");
}

TEST_CASE("input_shape is [features], [steps, channels] or [height, width, channels] with each dimension at most 65536") {
  CHECK(error_of(mlp_with("\"input_shape\": [28, 28, 1]", "\"input_shape\": [28, 28]")) ==
        "/model/input_shape [28, 28] does not match mnist10k's 28x28x1 images");
  CHECK(error_of(mlp_with("\"input_shape\": [28, 28, 1]", "\"input_shape\": [28, 28, 1, 1]")) ==
        "/model/input_shape must be [features], [steps, channels] or [height, width, channels], not [28, 28, 1, 1]");
  CHECK(error_of(mlp_with("\"input_shape\": [28, 28, 1]", "\"input_shape\": [70000, 1, 1]")) ==
        "/model/input_shape/0 must be a positive integer (at most 65536)");
  CHECK(error_of(mlp_with("\"input_shape\": [28, 28, 1]", "\"input_shape\": [28, 0, 1]")) ==
        "/model/input_shape/1 must be a positive integer (at most 65536)");
  CHECK(error_of(mlp_with("\"input_shape\": [28, 28, 1]", "\"input_shape\": [65536, 65536, 1]")) ==
        "/model/input_shape describes more than 2^24 values per example");
}

TEST_CASE("check_spec_against_dataset: the files as loaded must fit the job too") {
  const JobSpec spec = parse_job_spec(kMlp);
  Split split;
  split.dataset = "mnist10k";
  split.shape = {28, 28, 1};
  split.num_classes = 10;
  CHECK_NOTHROW(check_spec_against_dataset(spec, split));
  split.shape = {28, 32, 1};
  CHECK_THROWS_WITH_AS(check_spec_against_dataset(spec, split),
                       "/model/input_shape [28, 28, 1] does not match mnist10k's 28x32x1 images", SpecError);
  split.shape = {28, 28, 1};
  split.num_classes = 12;
  CHECK_THROWS_WITH_AS(check_spec_against_dataset(spec, split),
                       "/model/layers/3 must output 12 logits (the classes of mnist10k) but outputs [10]", SpecError);
  // A dataset whose table entry does not know its example shape checks only the classes at submit.
  DatasetInfo unknown_shape{"mnist10k", "", "a", "b", 10, "", ""};
  CHECK_NOTHROW(check_spec_against_dataset(spec, unknown_shape));
}

TEST_CASE("the TPU guide's CNN and the Keras multi-worker tutorial's CNN are reference jobs") {
  const JobSpec tpu = reference_job("tpu-cnn.json");
  CHECK(tpu.dataset.name == "fashion-mnist");
  REQUIRE(tpu.model.layers.size() == 6);
  CHECK(tpu.model.layers[0].filters == 256);
  CHECK(tpu.model.layers[1].filters == 256);
  CHECK(tpu.model.layers[3].units == 256);
  CHECK(tpu.model.layers[4].units == 128);
  for (const LayerSpec& layer : tpu.model.layers) {
    if (layer.type != LayerType::kFlatten) CHECK(layer.l2 == doctest::Approx(1e-5));
  }
  CHECK(tpu.optimizer.type == OptimizerType::kAdam);
  CHECK(tpu.training.global_batch_size == 200);
  // 28x28x1 -> 26x26x256 -> 24x24x256 -> 256 -> 128 -> 10: 38.4M float32 parameters (154 MB).
  size_t floats = 0;
  const ParamLayout layout = make_param_layout(tpu.model);
  for (const ParamInfo& p : layout.params()) floats += p.size;
  CHECK(floats == 38375818);

  const JobSpec keras = reference_job("keras-multiworker-cnn.json");
  CHECK(keras.dataset.name == "fashion-mnist");
  REQUIRE(keras.model.layers.size() == 4);
  CHECK(keras.model.layers[0].filters == 32);
  CHECK(keras.model.layers[2].units == 128);
  CHECK(keras.optimizer.type == OptimizerType::kSgd);
  CHECK(keras.optimizer.learning_rate == doctest::Approx(0.001));
  // 64 examples per worker, as the tutorial.
  CHECK(keras.training.global_batch_size == 64 * keras.training.workers);
}

// Regression (fuzz/job_spec_fuzz.cc): a number in range as a double but not as the float32 the
// spec keeps (1e-84 > 0, but 0 as a float) was accepted, and its canonical text ("epsilon": 0)
// then failed the same check where servers and workers parse it.
TEST_CASE("a number is checked against its range as the float32 the spec keeps") {
  CHECK(error_of(mlp_with("\"epsilon\": 1e-7", "\"epsilon\": 1e-84")) ==
        "/optimizer/epsilon is 1e-84, which is 0 as a float32: out of range (greater than 0 and at most 1)");
  CHECK(error_of(mlp_with("\"learning_rate\": 0.001", "\"learning_rate\": 1e-46")).find("/optimizer/learning_rate is 1e-46") == 0);
  // The smallest positive float32 is fine, and its canonical text parses to the same spec.
  const JobSpec tiny = parse_job_spec(mlp_with("\"epsilon\": 1e-7", "\"epsilon\": 1.5e-45"));
  CHECK(tiny.optimizer.epsilon > 0.0f);
  CHECK(job_spec_to_json(parse_accepted_job_spec(job_spec_to_json(tiny))) == job_spec_to_json(tiny));
}

TEST_CASE("training.compression: a name or an object, default none, canonical as an object only when on") {
  CHECK(parse_job_spec(kMlp).training.compression.kind == CompressionKind::kNone);
  CHECK(job_spec_to_json(parse_job_spec(kMlp)).find("compression") == std::string::npos);
  const JobSpec fp16 = parse_job_spec(mlp_with("\"workers\": 2", "\"workers\": 2, \"compression\": \"fp16\""));
  CHECK(fp16.training.compression.kind == CompressionKind::kFp16);
  const JobSpec bf16 = parse_job_spec(mlp_with("\"workers\": 2", "\"workers\": 2, \"compression\": \"bf16\""));
  CHECK(bf16.training.compression.kind == CompressionKind::kBf16);
  CHECK(job_spec_to_json(bf16).find(R"("compression":{"kind":"bf16"})") != std::string::npos);
  const JobSpec topk = parse_job_spec(
      mlp_with("\"workers\": 2", "\"workers\": 2, \"compression\": {\"kind\": \"topk\", \"fraction\": 0.05}"));
  CHECK(topk.training.compression.kind == CompressionKind::kTopk);
  CHECK(topk.training.compression.fraction == doctest::Approx(0.05));
  const JobSpec powersgd = parse_job_spec(
      mlp_with("\"workers\": 2", "\"workers\": 2, \"compression\": {\"kind\": \"powersgd\", \"rank\": 2}"));
  CHECK(powersgd.training.compression.kind == CompressionKind::kPowerSgd);
  CHECK(powersgd.training.compression.rank == 2);
  CHECK(parse_job_spec(mlp_with("\"workers\": 2", "\"workers\": 2, \"compression\": \"powersgd\""))
            .training.compression.rank == 4);  // the default
  CHECK(job_spec_to_json(powersgd).find(R"("compression":{"kind":"powersgd","rank":2})") != std::string::npos);
  for (const JobSpec& spec : {fp16, bf16, topk, powersgd}) {
    const JobSpec again = parse_job_spec(job_spec_to_json(spec));
    CHECK(job_spec_to_json(again) == job_spec_to_json(spec));
    CHECK(again.training.compression.kind == spec.training.compression.kind);
    CHECK(again.training.compression.fraction == spec.training.compression.fraction);
    CHECK(again.training.compression.rank == spec.training.compression.rank);
  }
  CHECK(job_spec_to_json(topk).find(R"("compression":{"kind":"topk","fraction":)") != std::string::npos);
  CHECK(parse_job_spec(mlp_with("\"workers\": 2", "\"workers\": 2, \"compression\": {\"kind\": \"none\"}"))
            .training.compression.kind == CompressionKind::kNone);
}

TEST_CASE("bad training.compression is rejected naming the field") {
  auto with = [](const std::string& c) { return mlp_with("\"workers\": 2", "\"workers\": 2, \"compression\": " + c); };
  CHECK(error_of(with("\"zip\"")) ==
        "/training/compression must be one of \"none\", \"fp16\", \"bf16\", \"topk\", \"powersgd\", not \"zip\"");
  CHECK(error_of(with("3")) == "/training/compression must be a string or an object, not an integer");
  CHECK(error_of(with("{\"fraction\": 0.1}")) == "/training/compression/kind is required");
  CHECK(error_of(with("{\"kind\": \"topk\", \"fraction\": 0}")) ==
        "/training/compression/fraction must be a number greater than 0 and at most 1");
  CHECK(error_of(with("{\"kind\": \"topk\", \"fraction\": 1.5}")) ==
        "/training/compression/fraction must be a number greater than 0 and at most 1");
  CHECK(error_of(with("{\"kind\": \"fp16\", \"fraction\": 0.1}")) == "/training/compression/fraction only applies to \"topk\"");
  CHECK(error_of(with("{\"kind\": \"topk\", \"rank\": 2}")) == "/training/compression/rank only applies to \"powersgd\"");
  CHECK(error_of(with("{\"kind\": \"topk\", \"ranks\": 2}")).find("/training/compression/ranks is not a known field") == 0);
  CHECK(error_of(with("\"zip\"")).find("\"powersgd\"") != std::string::npos);  // the kinds listed
  CHECK(error_of(with("{\"kind\": \"powersgd\", \"rank\": 0}")) ==
        "/training/compression/rank must be a positive integer (at most 64)");
  CHECK(error_of(with("{\"kind\": \"powersgd\", \"rank\": 65}")) ==
        "/training/compression/rank must be a positive integer (at most 64)");
  CHECK(error_of(with("{\"kind\": \"powersgd\", \"rank\": 2.5}")).find("/training/compression/rank") == 0);
  CHECK(error_of(with("{\"kind\": \"fp16\", \"rank\": 2}")) == "/training/compression/rank only applies to \"powersgd\"");
  CHECK(error_of(with("{\"kind\": \"powersgd\", \"fraction\": 0.1}")) ==
        "/training/compression/fraction only applies to \"topk\"");
}

TEST_CASE("activations: every Keras name on dense and conv2d, an activation layer, and bad ones named") {
  const char* names[] = {"linear", "relu", "sigmoid", "tanh", "softmax", "gelu", "elu", "leaky_relu", "swish", "silu"};
  for (const char* name : names) {
    CAPTURE(name);
    const JobSpec spec = parse_job_spec(mlp_with(R"("units": 500, "activation": "relu")",
                                                 std::string(R"("units": 500, "activation": ")") + name + "\""));
    CHECK(activation_name(spec.model.layers[2].activation) ==
          std::string(std::string(name) == "silu" ? "swish" : name));
  }
  CHECK(error_of(mlp_with(R"("units": 500, "activation": "relu")", R"("units": 500, "activation": "sigmod")"))
            .starts_with("/model/layers/2/activation"));
  // The activation layer: its activation is required, and round-trips through the stored spec.
  CHECK(error_of(mlp_with(R"({"type": "dense", "units": 500, "activation": "relu"})", R"({"type": "activation"})")) ==
        "/model/layers/2/activation is required");
  const JobSpec spec = parse_job_spec(
      mlp_with(R"({"type": "dense", "units": 500, "activation": "relu"})", R"({"type": "activation", "activation": "gelu"})"));
  CHECK(spec.model.layers[2].type == LayerType::kActivation);
  CHECK(spec.model.layers[2].activation == Activation::kGelu);
  CHECK(infer_shapes(spec.model)[2] == infer_shapes(spec.model)[1]);
}

TEST_CASE("pooling layers parse, infer their shapes and round-trip through the stored model spec") {
  const boost::json::value v = boost::json::parse(R"({"input_shape": [12, 12, 1], "seed": 3, "layers": [
    {"type": "conv2d", "filters": 4, "kernel_size": 3, "activation": "swish", "use_bias": false},
    {"type": "avgpool2d", "pool_size": [2, 3], "strides": 1},
    {"type": "activation", "activation": "tanh"},
    {"type": "global_maxpool2d"},
    {"type": "dense", "units": 5, "activation": "softmax"}]})");
  const ModelSpec model = spec_json::read_model_spec(v);
  CHECK(infer_shapes(model)[1] == Shape{9, 8, 4});
  CHECK(infer_shapes(model)[3] == Shape{4});
  const ModelSpec again = spec_json::read_model_spec(spec_json::model_spec_to_object(model));
  CHECK(boost::json::serialize(spec_json::model_spec_to_object(again)) == boost::json::serialize(spec_json::model_spec_to_object(model)));
  CHECK(again.layers[1].type == LayerType::kAvgPool2D);
  CHECK(again.layers[1].pool_size == std::array<int64_t, 2>{2, 3});
  CHECK(again.layers[4].activation == Activation::kSoftmax);
  CHECK_FALSE(again.layers[0].use_bias);
  CHECK(make_param_layout(again).find("layers.0.bias") == nullptr);
}

TEST_CASE("conv2d dilation_rate parses, round-trips, and its bad values are named") {
  const boost::json::value v = boost::json::parse(R"({"input_shape": [12, 12, 1], "seed": 3, "layers": [
    {"type": "conv2d", "filters": 4, "kernel_size": 3, "dilation_rate": [2, 3], "padding": "same"},
    {"type": "conv2d", "filters": 2, "kernel_size": 3, "dilation_rate": 2},
    {"type": "flatten"}, {"type": "dense", "units": 5}]})");
  const ModelSpec model = spec_json::read_model_spec(v);
  CHECK(model.layers[0].dilation_rate == std::array<int64_t, 2>{2, 3});
  CHECK(infer_shapes(model)[0] == Shape{12, 12, 4});
  CHECK(infer_shapes(model)[1] == Shape{8, 8, 2});  // 12 - 5 + 1
  const ModelSpec again = spec_json::read_model_spec(spec_json::model_spec_to_object(model));
  CHECK(again.layers[1].dilation_rate == std::array<int64_t, 2>{2, 2});
  CHECK(boost::json::serialize(spec_json::model_spec_to_object(model)).find("dilation_rate") != std::string::npos);
  auto error = [](const char* layer) {
    try {
      spec_json::read_model_spec(boost::json::parse(std::string(R"({"input_shape": [12, 12, 1], "layers": [)") + layer +
                                                    R"(, {"type": "flatten"}, {"type": "dense", "units": 2}]})"));
    } catch (const SpecError& e) {
      return std::string(e.what());
    }
    return std::string("(accepted)");
  };
  CHECK(error(R"({"type": "conv2d", "filters": 1, "kernel_size": 3, "dilation_rate": 0})").find("/model/layers/0/dilation_rate ") == 0);
  CHECK(error(R"({"type": "conv2d", "filters": 1, "kernel_size": 3, "dilation_rate": [1, 2, 3]})").find("/model/layers/0/dilation_rate ") == 0);
  CHECK(error(R"({"type": "dense", "units": 3, "dilation_rate": 2})").find("/model/layers/0") == 0);
}

TEST_CASE("learning-rate schedules: parsed, written back whole, and bad fields named") {
  const std::string lr = R"("learning_rate": 0.001)";
  const JobSpec spec = parse_job_spec(mlp_with(lr, R"("learning_rate": {"schedule": "cosine_decay",
      "initial_learning_rate": 0.0, "decay_steps": 400, "alpha": 0.05, "warmup_steps": 20, "warmup_target": 0.002})"));
  CHECK(spec.optimizer.schedule.kind == LearningRateSchedule::Kind::kCosineDecay);
  CHECK(spec.optimizer.schedule.decay_steps == 400);
  CHECK(*spec.optimizer.schedule.warmup_target == 0.002);
  CHECK(spec.optimizer.learning_rate == 0.0f);  // the rate at step 0
  // Servers and workers read the canonical text: the schedule survives it.
  const JobSpec again = parse_job_spec(job_spec_to_json(spec));
  CHECK(job_spec_to_json(again) == job_spec_to_json(spec));
  CHECK(again.optimizer.schedule.warmup_steps == 20);

  CHECK(parse_job_spec(mlp_with(lr, R"("learning_rate": {"schedule": "piecewise_constant", "boundaries": [100, 200],
      "values": [0.01, 0.005, 0.001]})")).optimizer.learning_rate == 0.01f);
  CHECK(error_of(mlp_with(lr, R"("learning_rate": {"schedule": "cosine"})"))
            .starts_with("/optimizer/learning_rate/schedule must be one of"));
  CHECK(error_of(mlp_with(lr, R"("learning_rate": {"schedule": "exponential_decay", "initial_learning_rate": 0.1,
      "decay_rate": 0.9})")) == "/optimizer/learning_rate/decay_steps is required");
  CHECK(error_of(mlp_with(lr, R"("learning_rate": {"schedule": "piecewise_constant", "boundaries": [100, 50],
      "values": [0.1, 0.01, 0.001]})")) == "/optimizer/learning_rate/boundaries/1 must be above the boundary before it");
  CHECK(error_of(mlp_with(lr, R"("learning_rate": {"schedule": "piecewise_constant", "boundaries": [100],
      "values": [0.1]})")).starts_with("/optimizer/learning_rate/values must be an array of 2 rates"));
  CHECK(error_of(mlp_with(lr, R"("learning_rate": {"schedule": "cosine_decay", "initial_learning_rate": 0.1,
      "decay_steps": 10, "warmup_steps": 5})")).starts_with("/optimizer/learning_rate/warmup_target is required"));
  CHECK(error_of(mlp_with(lr, R"("learning_rate": {"schedule": "cosine_decay", "initial_learning_rate": 0.1,
      "decay_steps": 10, "decay": 5})")).starts_with("/optimizer/learning_rate"));
}

TEST_CASE("rmsprop and adamw: Keras' defaults, written back whole, bad fields named") {
  const std::string adam = R"("type": "adam", "learning_rate": 0.001, "epsilon": 1e-7)";
  const JobSpec rms = parse_job_spec(mlp_with(adam, R"("type": "rmsprop", "momentum": 0.5, "centered": true)"));
  CHECK(rms.optimizer.type == OptimizerType::kRmsprop);
  CHECK(rms.optimizer.rho == 0.9f);
  CHECK(rms.optimizer.learning_rate == 0.001f);
  CHECK(rms.optimizer.centered);
  CHECK(job_spec_to_json(parse_job_spec(job_spec_to_json(rms))) == job_spec_to_json(rms));
  const JobSpec adamw = parse_job_spec(mlp_with(adam, R"("type": "adamw")"));
  CHECK(adamw.optimizer.weight_decay == 0.004f);
  CHECK(job_spec_to_json(parse_job_spec(job_spec_to_json(adamw))) == job_spec_to_json(adamw));
  const JobSpec sgd = parse_job_spec(mlp_with(adam, R"("type": "sgd", "weight_decay": 0.0005)"));
  CHECK(sgd.optimizer.weight_decay == 0.0005f);
  CHECK(error_of(mlp_with(adam, R"("type": "rmsprop", "rho": 1.0)")) == "/optimizer/rho must be below 1");
  CHECK(error_of(mlp_with(adam, R"("type": "rmsprop", "beta_1": 0.9)")).starts_with("/optimizer"));
  CHECK(error_of(mlp_with(adam, R"("type": "adamw", "weight_decay": -1)")).starts_with("/optimizer/weight_decay"));
}

TEST_CASE("layer_norm: fields parsed and written back, parameters named as Keras names them") {
  const JobSpec spec = parse_job_spec(mlp_with(R"({"type": "dense", "units": 500, "activation": "relu"})",
                                               R"({"type": "layer_norm", "epsilon": 1e-5, "center": false})"));
  CHECK(spec.model.layers[2].type == LayerType::kLayerNorm);
  CHECK(spec.model.layers[2].epsilon == 1e-5f);
  CHECK_FALSE(spec.model.layers[2].center);
  CHECK(job_spec_to_json(parse_job_spec(job_spec_to_json(spec))) == job_spec_to_json(spec));
  const ParamLayout layout = make_param_layout(spec.model);
  CHECK(layout.find("layers.2.gamma") != nullptr);
  CHECK(layout.find("layers.2.beta") == nullptr);
  CHECK(error_of(mlp_with(R"({"type": "dense", "units": 500, "activation": "relu"})",
                          R"({"type": "layer_norm", "scale": 1})")) == "/model/layers/2/scale must be a boolean, not an integer");
}

TEST_CASE("every reference job of deploy/jobs parses and fits its dataset, the residual CNN's graph included") {
  int jobs = 0;
  for (const auto& entry : std::filesystem::directory_iterator(PSTRAIN_JOBS_DIR)) {
    if (entry.path().extension() != ".json") continue;
    INFO(entry.path().string());
    const JobSpec spec = reference_job(entry.path().filename().string());
    CHECK(!spec.model.layers.empty());
    ++jobs;
  }
  CHECK(jobs >= 8);
  const JobSpec resnet = reference_job("fashion-mnist-resnet.json");
  CHECK(resnet.model.layers[3].virtual_batch_size == 64);  // the global batch over the 2 workers
  CHECK(make_param_layout(resnet.model).find("layers.block1.moving_variance") != nullptr);
  CHECK(resnet.loss.type == LossType::kCategoricalCrossEntropy);
}
