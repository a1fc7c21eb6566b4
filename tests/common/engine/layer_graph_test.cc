// The layer graph: named layers and inputs, add and concatenate, the evaluation order, the
// gradients of values several layers read, and the spec errors a graph can have.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "common/base/error.h"
#include "common/data/job_spec.h"
#include "common/engine/model_spec.h"
#include "common/engine/nn/model.h"
#include "tests/common/engine/gradient_check.h"

using namespace pstrain;
using namespace pstrain::testing;
using nn::Model;

namespace {

// The error a model spec gets: "path detail".
std::string error_of(const ModelSpec& spec) {
  try {
    infer_shapes(spec);
  } catch (const SpecError& e) {
    return e.what();
  }
  return "(accepted)";
}

ModelSpec flat(std::vector<LayerSpec> layers) {
  ModelSpec spec;
  spec.input_shape = {6};
  spec.layers = std::move(layers);
  return spec;
}

}  // namespace

TEST_CASE("a residual block: a value two layers read gets both gradients") {
  const ModelSpec spec = flat({named(dense(5, false), "a"), named(dense(5, true), "b"), named(dense(5, false), "c"),
                               named(simple(LayerType::kAdd), "sum", {"a", "c"}), dense(3, false)});
  check_gradients(spec, 4, 101);
  const ParamLayout layout = make_param_layout(spec);
  CHECK(layout.find("layers.a.kernel") != nullptr);
  CHECK(layout.find("layers.c.bias") != nullptr);
  CHECK(layout.find("layers.4.kernel") != nullptr);  // an unnamed layer keeps its index
}

TEST_CASE("merges of the model's input, of one value twice, of three values") {
  check_gradients(flat({named(simple(LayerType::kConcatenate), "both", {"input", "input"}), dense(3, false)}), 3, 102);
  check_gradients(flat({named(dense(6, true), "a"), named(simple(LayerType::kAdd), "twice", {"a", "a"}),
                        named(simple(LayerType::kAdd), "skip", {"twice", "input"}), dense(3, false)}),
                  3, 103);
  check_gradients(flat({named(dense(4, true), "a", {"input"}), named(dense(2, false), "b", {"input"}),
                        named(dense(3, false), "c", {"a"}),
                        named(simple(LayerType::kConcatenate), "cat", {"a", "b", "c"}), dense(3, false)}),
                  4, 104);
}

TEST_CASE("conv2d residual blocks and a channel concatenation, pooled to the output") {
  ModelSpec spec;
  spec.input_shape = {5, 4, 2};
  const LayerSpec same = conv(3, 3, 3, true, {1, 1}, Padding::kSame);
  const LayerSpec same_linear = conv(3, 3, 3, false, {1, 1}, Padding::kSame);
  spec.layers = {named(same, "c1"),
                 named(same_linear, "c2"),
                 named(simple(LayerType::kAdd), "res", {"c1", "c2"}),
                 named(conv(2, 1, 1, false), "side", {"input"}),
                 named(simple(LayerType::kConcatenate), "cat", {"res", "side"}),
                 simple(LayerType::kGlobalAvgPool2D),
                 dense(3, false)};
  CHECK(infer_shapes(spec)[4] == Shape{5, 4, 5});
  check_gradients(spec, 3, 105);
}

TEST_CASE("concatenate by hand: each position's channels, first input's then second's") {
  ModelSpec spec;
  spec.input_shape = {2, 1, 1};
  LayerSpec r = reshape({2, 1, 1});
  spec.layers = {named(r, "a", {"input"}), named(conv(2, 1, 1, false), "b", {"input"}),
                 named(simple(LayerType::kConcatenate), "cat", {"a", "b"}), simple(LayerType::kFlatten)};
  Model<double> model(spec, 1);
  std::vector<double> params(model.layout().total_size(), 0.0);
  const ParamInfo* k = model.layout().find("layers.b.kernel");  // [1, 1, 1, 2]
  params[k->offset] = 10;
  params[k->offset + 1] = 100;
  const std::vector<double> x = {1, 2};
  const auto y = model.forward(params.data(), x.data(), 1);
  REQUIRE(y.rows() == 6);
  CHECK(std::vector<double>(y.data(), y.data() + 6) == std::vector<double>{1, 10, 100, 2, 20, 200});
}

TEST_CASE("a chain with names and inputs spelled out is the plain chain, parameters in the same places") {
  const ModelSpec plain = flat({dense(5, true), dense(4, false), dense(3, false)});
  const ModelSpec spelled = flat({named(dense(5, true), "h1", {"input"}), named(dense(4, false), "h2", {"h1"}),
                                  named(dense(3, false), "out", {"h2"})});
  Model<double> a(plain, 2), b(spelled, 2);
  REQUIRE(a.layout().total_size() == b.layout().total_size());
  CHECK(b.layout().params()[2].name == "layers.h2.kernel");
  const Problem p = random_problem(a, 2, 7);
  const auto ya = a.forward(p.params.data(), p.inputs.data(), 2);
  const auto yb = b.forward(p.params.data(), p.inputs.data(), 2);
  CHECK(std::vector<double>(ya.data(), ya.data() + 6) == std::vector<double>(yb.data(), yb.data() + 6));
}

TEST_CASE("layers listed before their inputs run after them, and parameters follow the evaluation order") {
  // "late" is listed first but reads "early"; the output (last listed) reads "late".
  const ModelSpec spec = flat({named(dense(4, false), "late", {"early"}), named(dense(5, true), "early", {"input"}),
                               named(dense(3, false), "out", {"late"})});
  const ModelGraph g = model_graph(spec);
  CHECK(g.order == std::vector<size_t>{1, 0, 2});
  const ParamLayout layout = make_param_layout(spec);
  CHECK(layout.params()[0].name == "layers.early.kernel");
  CHECK(layout.params()[2].name == "layers.late.kernel");
  check_gradients(spec, 3, 106);
}

TEST_CASE("graph errors name the field: unknown, duplicate and bad names, cycles, dead ends, shapes, input counts") {
  CHECK(error_of(flat({named(dense(4, false), "a"), named(dense(3, false), "b", {"nope"})})) ==
        "/model/layers/1/inputs/0 names no layer: \"nope\"");
  CHECK(error_of(flat({named(dense(4, false), "a"), named(dense(3, false), "a")})) ==
        "/model/layers/1/name \"a\" is already the name of layer 0");
  CHECK(error_of(flat({named(dense(3, false), "12")})).find("/model/layers/0/name cannot be all digits") == 0);
  CHECK(error_of(flat({named(dense(3, false), "input")})) == "/model/layers/0/name \"input\" names the model's input");
  CHECK(error_of(flat({named(dense(3, false), "a b")})) ==
        "/model/layers/0/name must be 1 to 64 letters, digits, '_' or '-'");
  CHECK(error_of(flat({named(dense(4, false), "a", {"c"}), named(dense(4, false), "b", {"a"}),
                       named(dense(4, false), "c", {"b"}), named(dense(3, false), "out", {"input"})})) ==
        "/model/layers/0/inputs the layers form a cycle: \"a\" -> \"b\" -> \"c\" -> \"a\"");
  CHECK(error_of(flat({named(dense(4, false), "self", {"self"}), dense(3, false)})) ==
        "/model/layers/0/inputs the layers form a cycle: \"self\" -> \"self\"");
  CHECK(error_of(flat({named(dense(4, false), "unused", {"input"}), named(dense(3, false), "out", {"input"})})) ==
        "/model/layers/0 layer \"unused\" feeds no layer; the model's output is the last layer listed");
  CHECK(error_of(flat({named(dense(4, false), "a"), named(dense(5, false), "b", {"input"}),
                       named(simple(LayerType::kAdd), "sum", {"a", "b"}), dense(3, false)})) ==
        "/model/layers/2/inputs add needs inputs of one shape but gets [4] and [5]");
  ModelSpec image;
  image.input_shape = {4, 4, 1};
  image.layers = {named(conv(2, 3, 3, false), "small"), named(conv(2, 1, 1, false), "big", {"input"}),
                  named(simple(LayerType::kConcatenate), "cat", {"small", "big"}), simple(LayerType::kFlatten)};
  CHECK(error_of(image) == "/model/layers/2/inputs concatenate joins along the last axis and needs the other axes "
                           "equal, but gets [2, 2, 2] and [4, 4, 2]");
  CHECK(error_of(flat({named(dense(4, false), "a"), named(dense(3, false), "b", {"a", "input"})})) ==
        "/model/layers/1/inputs dense takes one input, not 2");
  CHECK(error_of(flat({named(dense(4, false), "a"), named(simple(LayerType::kAdd), "b", {"a"}), dense(3, false)})) ==
        "/model/layers/1/inputs add needs two or more inputs");
  // Without inputs, a merge reads only the previous layer.
  CHECK(error_of(flat({dense(4, false), simple(LayerType::kConcatenate)})) ==
        "/model/layers/1/inputs concatenate needs two or more inputs");
}

TEST_CASE("names and inputs in JSON, kept through a round trip, and bad JSON values named") {
  const std::string text = R"({"input_shape": [6], "seed": 3, "layers": [
      {"type": "dense", "units": 5, "activation": "relu", "name": "h"},
      {"type": "dense", "units": 5, "name": "g"},
      {"type": "add", "name": "sum", "inputs": ["h", "g"]},
      {"type": "dense", "units": 2}]})";
  const ModelSpec spec = parse_model_spec(text);
  CHECK(spec.layers[2].type == LayerType::kAdd);
  CHECK(spec.layers[2].inputs == std::vector<std::string>{"h", "g"});
  const ModelSpec again = parse_model_spec(model_spec_to_json(spec));
  CHECK(again.layers[0].name == "h");
  CHECK(again.layers[2].inputs == spec.layers[2].inputs);
  CHECK(make_param_layout(again).find("layers.g.kernel") != nullptr);
  auto error = [](const std::string& t) {
    try {
      parse_model_spec(t);
    } catch (const SpecError& e) {
      return std::string(e.what());
    }
    return std::string("(accepted)");
  };
  CHECK(error(R"({"input_shape": [6], "layers": [{"type": "dense", "units": 2, "inputs": "input"}]})") ==
        "/model/layers/0/inputs must be an array of layer names, not a string");
  CHECK(error(R"({"input_shape": [6], "layers": [{"type": "dense", "units": 2, "inputs": [3]}]})")
            .find("/model/layers/0/inputs/0 ") == 0);
  CHECK(error(R"({"input_shape": [6], "layers": [{"type": "dense", "units": 2, "name": 3}]})")
            .find("/model/layers/0/name ") == 0);
}

TEST_CASE("dot_interaction: the lower triangle's dots by hand, gradients checked, with and without self-interaction") {
  ModelSpec spec;
  spec.input_shape = {6};
  LayerSpec dot = simple(LayerType::kDotInteraction);
  spec.layers = {named(dense(2, false), "x", {"input"}), named(dense(2, true), "y", {"input"}),
                 named(dense(2, false), "z", {"input"}), named(dot, "dots", {"x", "y", "z"}), dense(3, false)};
  CHECK(infer_shapes(spec)[3] == Shape{3});
  check_gradients(spec, 4, 106);
  spec.layers[3].self_interaction = true;
  CHECK(infer_shapes(spec)[3] == Shape{6});
  check_gradients(spec, 4, 107);
  // One value twice (x . x through two inputs) gets both terms.
  spec.layers = {named(dense(2, false), "x", {"input"}), named(dense(2, true), "y", {"input"}),
                 named(dot, "dots", {"x", "x", "y"}), dense(3, false)};
  check_gradients(spec, 3, 108);

  // By hand: inputs (1, 2), (3, 4), (5, 6) as slices of the model's input.
  ModelSpec hand;
  hand.input_shape = {6};
  LayerSpec s0 = simple(LayerType::kSlice), s1 = s0, s2 = s0;
  s0.begin = 0, s1.begin = 2, s2.begin = 4;
  s0.size = s1.size = s2.size = 2;
  hand.layers = {named(s0, "p", {"input"}), named(s1, "q", {"input"}), named(s2, "r", {"input"}), named(dot, "dots", {"p", "q", "r"})};
  Model<double> model(hand, 1);
  const std::vector<double> x = {1, 2, 3, 4, 5, 6};
  const auto y = model.forward(nullptr, x.data(), 1);
  REQUIRE(y.rows() == 3);
  CHECK(std::vector<double>(y.data(), y.data() + 3) == std::vector<double>{1 * 3 + 2 * 4, 1 * 5 + 2 * 6, 3 * 5 + 4 * 6});
  hand.layers[3].self_interaction = true;
  Model<double> selfs(hand, 1);
  const auto z = selfs.forward(nullptr, x.data(), 1);
  REQUIRE(z.rows() == 6);
  CHECK(std::vector<double>(z.data(), z.data() + 6) == std::vector<double>{5, 11, 25, 17, 39, 61});
  // Inputs of different sizes are refused, naming the field.
  hand.layers[2].size = 1;
  CHECK(error_of(hand).find("/model/layers/3/inputs dot_interaction needs inputs of one size") == 0);
}
