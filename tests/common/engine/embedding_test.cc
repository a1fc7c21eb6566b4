// embedding: lookups by hand, the table's gradient against finite differences, Keras'
// initializer, ids that are not ids, and the spec's checks.
#include <doctest/doctest.h>

#include <cmath>
#include <string>
#include <vector>

#include "common/base/error.h"
#include "common/data/job_spec.h"
#include "common/engine/nn/model.h"
#include "tests/common/engine/gradient_check.h"

using namespace pstrain;
using namespace pstrain::testing;
using nn::Model;

namespace {

LayerSpec embedding(int64_t input_dim, int64_t output_dim) {
  LayerSpec l = simple(LayerType::kEmbedding);
  l.input_dim = input_dim;
  l.output_dim = output_dim;
  return l;
}

// 3 ids per example from a vocabulary of 5, vectors of 4, then a dense layer of 3 classes.
ModelSpec ids_model() {
  ModelSpec spec;
  spec.input_shape = {3};
  spec.layers = {embedding(5, 4), simple(LayerType::kFlatten), dense(3, false)};
  return spec;
}

// 4 ids per example (negative: padding) combined into one vector of 3, then 2 classes.
ModelSpec bag_model(Combiner combiner) {
  ModelSpec spec;
  spec.input_shape = {4};
  LayerSpec table = embedding(6, 3);
  table.combiner = combiner;
  spec.layers = {table, dense(2, false)};
  return spec;
}

}  // namespace

TEST_CASE("embedding combiners by hand: sum and mean skip padding, an example of padding only gives zeros") {
  for (const Combiner c : {Combiner::kSum, Combiner::kMean}) {
    CAPTURE(static_cast<int>(c));
    Model<double> model(bag_model(c), 3);
    CHECK(infer_shapes(bag_model(c))[0] == Shape{3});
    std::vector<double> params(model.layout().total_size(), 0.0);
    const ParamInfo* table = model.layout().find("layers.0.embeddings");
    for (size_t k = 0; k < 18; ++k) params[table->offset + k] = static_cast<double>(k);  // row r: 3r, 3r+1, 3r+2
    const ParamInfo* kernel = model.layout().find("layers.1.kernel");  // [3, 2]: pass values 0 and 2
    params[kernel->offset + 0 * 2 + 0] = 1;
    params[kernel->offset + 2 * 2 + 1] = 1;
    const std::vector<double> ids = {1, -1, 4, 4, /**/ -1, -1, -1, -1, /**/ 5, -1, -1, -1};
    const auto y = model.forward(params.data(), ids.data(), 3);
    // Example 0: rows 1, 4, 4 -> (3 + 12 + 12, 5 + 14 + 14); mean over 3 ids.
    const std::vector<double> want = c == Combiner::kSum ? std::vector<double>{27, 33, 0, 0, 15, 17}
                                                         : std::vector<double>{9, 11, 0, 0, 15, 17};
    CHECK(std::vector<double>(y.data(), y.data() + 6) == want);
  }
  // Without a combiner a negative id is no id.
  Model<float> plain(ids_model(), 1);
  std::vector<float> params(plain.layout().total_size(), 0.0f);
  const std::vector<float> padded = {0, -1, 1};
  CHECK_THROWS_AS(plain.forward(params.data(), padded.data(), 1), Error);
}

TEST_CASE("embedding combiners' table gradient: finite differences with padding and repeated ids") {
  for (const Combiner c : {Combiner::kSum, Combiner::kMean}) {
    CAPTURE(static_cast<int>(c));
    check_gradients(bag_model(c), 4, 602, GradientCheck{{}, [](Problem& p) {
                      p.inputs = {0, 1, 1, -1, /**/ 5, -1, 5, 5, /**/ -1, -1, -1, -1, /**/ 2, 3, 4, 0};
                    }});
  }
}

TEST_CASE("embedding by hand: each id becomes its row, in order") {
  Model<double> model(ids_model(), 2);
  CHECK(infer_shapes(ids_model())[0] == Shape{3, 4});
  std::vector<double> params(model.layout().total_size(), 0.0);
  const ParamInfo* table = model.layout().find("layers.0.embeddings");
  REQUIRE(table != nullptr);
  CHECK(table->shape == Shape{5, 4});
  for (size_t k = 0; k < 20; ++k) params[table->offset + k] = static_cast<double>(k);
  const ParamInfo* kernel = model.layout().find("layers.2.kernel");  // [12, 3]: pass value 0 of each id's row
  params[kernel->offset + 0 * 3 + 0] = 1;
  params[kernel->offset + 4 * 3 + 1] = 1;
  params[kernel->offset + 8 * 3 + 2] = 1;
  const std::vector<double> ids = {4, 0, 2, 1, 1, 3};
  const auto y = model.forward(params.data(), ids.data(), 2);
  CHECK(std::vector<double>(y.data(), y.data() + 6) == std::vector<double>{16, 0, 8, 4, 4, 12});
}

TEST_CASE("embedding's table gradient: finite differences, an id used twice summed") {
  // Every entry is checked (the model is small); id 4 three times in one example.
  check_gradients(ids_model(), 4, 601, GradientCheck{{}, [](Problem& p) {
                    p.inputs = {0, 1, 1, 4, 4, 4, 2, 0, 3, 1, 2, 2};
                  }});
}

TEST_CASE("embeddings start uniform within 0.05 of zero, and a value that is not an id fails the step by name") {
  Model<float> model(ids_model(), 1);
  std::vector<float> params(model.layout().total_size());
  glorot_uniform_init(model.layout(), 3, params.data());
  const ParamInfo* table = model.layout().find("layers.0.embeddings");
  float largest = 0;
  for (size_t k = 0; k < table->size; ++k) largest = std::max(largest, std::abs(params[table->offset + k]));
  CHECK(largest > 0.0f);
  CHECK(largest < 0.05f);
  for (const std::vector<float>& bad : {std::vector<float>{0, 5, 1}, std::vector<float>{0, 1.5f, 1},
                                        std::vector<float>{-1, 0, 0}}) {
    CHECK_THROWS_AS(model.forward(params.data(), bad.data(), 1), Error);
  }
  const std::vector<float> bad = {0, 7, 1};
  CHECK_THROWS_WITH_AS(model.forward(params.data(), bad.data(), 1),
                       "embedding: input 7.000000 (value 1 of an example) is not an id in 0..4", Error);
}

TEST_CASE("embedding in JSON: input_dim and output_dim required, a flat input of ids") {
  auto error = [](const std::string& input, const std::string& layer) {
    try {
      parse_model_spec(R"({"input_shape": )" + input + R"(, "layers": [)" + layer +
                       R"(, {"type": "flatten"}, {"type": "dense", "units": 2}]})");
    } catch (const SpecError& e) {
      return std::string(e.what());
    }
    return std::string("(accepted)");
  };
  CHECK(error("[3]", R"({"type": "embedding", "input_dim": 10, "output_dim": 4})") == "(accepted)");
  CHECK(error("[3]", R"({"type": "embedding", "output_dim": 4})") == "/model/layers/0/input_dim is required");
  CHECK(error("[3]", R"({"type": "embedding", "input_dim": 10, "output_dim": 0})").find("/model/layers/0/output_dim ") ==
        0);
  CHECK(error("[2, 2, 1]", R"({"type": "embedding", "input_dim": 10, "output_dim": 4})") ==
        "/model/layers/0/type embedding needs a flat input of ids but gets [2, 2, 1]");
  const ModelSpec spec = parse_model_spec(R"({"input_shape": [3], "layers": [
      {"type": "embedding", "input_dim": 10, "output_dim": 4}, {"type": "flatten"}, {"type": "dense", "units": 2}]})");
  CHECK(parse_model_spec(model_spec_to_json(spec)).layers[0].output_dim == 4);
  CHECK(parse_model_spec(model_spec_to_json(spec)).layers[0].combiner == Combiner::kNone);
  // combiner: one vector per example; the JSON keeps it.
  const ModelSpec bag = parse_model_spec(R"({"input_shape": [3], "layers": [
      {"type": "embedding", "input_dim": 10, "output_dim": 4, "combiner": "mean"}, {"type": "dense", "units": 2}]})");
  CHECK(infer_shapes(bag)[0] == Shape{4});
  CHECK(parse_model_spec(model_spec_to_json(bag)).layers[0].combiner == Combiner::kMean);
  CHECK(error("[3]", R"({"type": "embedding", "input_dim": 10, "output_dim": 4, "combiner": "max"})").find(
            "/model/layers/0/combiner ") == 0);
}

namespace {

LayerSpec slice(int64_t begin, int64_t size, std::string name, std::vector<std::string> inputs = {"input"}) {
  LayerSpec l = simple(LayerType::kSlice);
  l.begin = begin;
  l.size = size;
  return named(l, std::move(name), std::move(inputs));
}

// A table's row: [number, id, number, number]: the id (slot 0-3) through an embedding, the
// numbers through their own slice, concatenated into a dense layer of 3 classes.
ModelSpec mixed_model() {
  ModelSpec spec;
  spec.input_shape = {4};
  spec.layers = {slice(1, 1, "id"),
                 named(embedding(4, 2), "vectors", {"id"}),
                 named(simple(LayerType::kFlatten), "flat", {"vectors"}),
                 slice(2, 2, "numbers"),
                 named(simple(LayerType::kConcatenate), "both", {"flat", "numbers"}),
                 named(dense(3, false), "out", {"both"})};
  return spec;
}

}  // namespace

TEST_CASE("slice: the features asked for, its gradient into those features only, and the spec's checks") {
  ModelSpec spec;
  spec.input_shape = {6};
  spec.layers = {dense(6, true), slice(2, 3, "mid", {"0"}), dense(3, false)};
  spec.layers[2].inputs = {"mid"};
  CHECK(infer_shapes(spec)[1] == Shape{3});
  check_gradients(spec, 5, 611);  // through the slice into the dense layer before it
  // Ids and numbers from one input row: the embedding's table and the dense kernel.
  check_gradients(mixed_model(), 4, 612, GradientCheck{{}, [](Problem& p) {
                    for (size_t b = 0; b < 4; ++b) p.inputs[b * 4 + 1] = static_cast<double>(b % 4);
                  }});
  Model<double> model(mixed_model(), 1);
  std::vector<double> params(model.layout().total_size(), 0.0);
  const ParamInfo* table = model.layout().find("layers.vectors.embeddings");
  REQUIRE(table != nullptr);
  for (size_t k = 0; k < 8; ++k) params[table->offset + k] = static_cast<double>(k);
  const ParamInfo* kernel = model.layout().find("layers.out.kernel");  // [4, 3]
  params[kernel->offset + 0 * 3 + 0] = 1;  // the id's first value
  params[kernel->offset + 1 * 3 + 1] = 1;  // its second
  params[kernel->offset + 3 * 3 + 2] = 1;  // the last number
  const std::vector<double> row = {9, 3, 7, -5};
  const auto y = model.forward(params.data(), row.data(), 1);
  CHECK(std::vector<double>(y.data(), y.data() + 3) == std::vector<double>{6, 7, -5});

  const auto error_path = [](const std::string& layer) {
    const std::string text = R"({"dataset": {"name": "mnist10k"}, "model": {"input_shape": [4], "layers": [)" + layer +
                             R"(, {"type": "dense", "units": 10}]}, "optimizer": {"type": "sgd", "learning_rate": 0.1},
                             "training": {"global_batch_size": 8}})";
    try {
      parse_job_spec(text);
    } catch (const SpecError& e) {
      return e.path();
    }
    return std::string("(accepted)");
  };
  CHECK(error_path(R"({"type": "slice", "begin": 1, "size": 3})") == "/model/input_shape");  // shapes fine; mnist is 28x28
  CHECK(error_path(R"({"type": "slice", "begin": 4, "size": 1})") == "/model/layers/0/begin");
  CHECK(error_path(R"({"type": "slice", "begin": 2, "size": 3})") == "/model/layers/0/size");
  CHECK(error_path(R"({"type": "slice", "begin": 0})") == "/model/layers/0/size");
  const JobSpec round = parse_accepted_job_spec(job_spec_to_json(parse_accepted_job_spec(
      R"({"dataset": {"name": "x"}, "model": {"input_shape": [4], "layers": [{"type": "slice", "begin": 1, "size": 2},
          {"type": "dense", "units": 2}]}, "optimizer": {"type": "sgd", "learning_rate": 0.1}, "training": {"global_batch_size": 8}})")));
  CHECK(round.model.layers[0].begin == 1);
  CHECK(round.model.layers[0].size == 2);
}
