// The arithmetic the benchmarks divide by (model_flops.h): each counted layer against a count
// by hand, layers without products at zero, and a graph's layers each counted once.
#include "common/engine/model_flops.h"

#include <doctest/doctest.h>

#include "common/data/job_spec.h"

using namespace pstrain;

namespace {

double flops_of(const std::string& model_json) { return forward_flops(parse_model_spec(model_json)); }

}  // namespace

TEST_CASE("forward FLOPs: dense, conv2d and conv1d count 2 per multiply-add of their products, other layers none") {
  // MLP 784-700-500-10: 2 (784 x 700 + 700 x 500 + 500 x 10).
  CHECK(flops_of(R"({"input_shape": [784], "layers": [{"type": "dense", "units": 700, "activation": "relu"},
      {"type": "dense", "units": 500, "activation": "relu"}, {"type": "dropout", "rate": 0.5}, {"type": "dense", "units": 10}]})") ==
        2.0 * (784 * 700 + 700 * 500 + 500 * 10));
  // conv 3x3x1->32 valid on 28x28 (26x26 out), pool to 13x13, flatten, dense 10.
  CHECK(flops_of(R"({"input_shape": [28, 28, 1], "layers": [{"type": "conv2d", "filters": 32, "kernel_size": [3, 3]},
      {"type": "maxpool2d"}, {"type": "batch_norm"}, {"type": "flatten"}, {"type": "dense", "units": 10}]})") ==
        2.0 * (26 * 26 * 32 * 9 * 1) + 2.0 * (13 * 13 * 32 * 10));
  // embedding (a lookup: 0), conv1d k=5 valid over 20 steps of 8 (16 out, 4 filters), a dense per step.
  CHECK(flops_of(R"({"input_shape": [20], "layers": [{"type": "embedding", "input_dim": 50, "output_dim": 8},
      {"type": "conv1d", "filters": 4, "kernel_size": 5}, {"type": "dense", "units": 3}, {"type": "global_maxpool1d"}]})") ==
        2.0 * (16 * 4 * 5 * 8) + 2.0 * (16 * 4 * 3));
}

TEST_CASE("forward FLOPs: lstm and gru by gates and steps, attention's projections, scores and context, a graph's layers once") {
  // 12 steps of 6: a bidirectional LSTM of 5 units, then a GRU of 3 over its 10 channels.
  CHECK(flops_of(R"({"input_shape": [12], "layers": [{"type": "embedding", "input_dim": 9, "output_dim": 6},
      {"type": "lstm", "units": 5, "bidirectional": true, "return_sequences": true}, {"type": "gru", "units": 3}]})") ==
        2.0 * 12 * 4 * 5 * (6 + 5) * 2 + 2.0 * 12 * 3 * 3 * (10 + 3));
  // 7 steps of 8 channels, 2 heads of key 4 (value 4): Q K V, scores and context, the output.
  const double attention = 2.0 * 7 * 8 * 2 * (2 * 4 + 4) + 2.0 * 2 * 7 * 7 * (4 + 4) + 2.0 * 7 * 2 * 4 * 8;
  CHECK(flops_of(R"({"input_shape": [7], "layers": [{"name": "x", "type": "embedding", "input_dim": 9, "output_dim": 8},
      {"name": "a", "type": "multi_head_attention", "num_heads": 2, "key_dim": 4},
      {"type": "add", "inputs": ["x", "a"]}, {"type": "global_avgpool1d"}, {"type": "dense", "units": 2}]})") ==
        attention + 2.0 * 8 * 2);
  // Two branches off the input: each dense counted once, by its own input.
  CHECK(flops_of(R"({"input_shape": [10], "layers": [{"name": "a", "type": "dense", "units": 4, "inputs": ["input"]},
      {"name": "b", "type": "dense", "units": 6, "inputs": ["input"]}, {"type": "concatenate", "inputs": ["a", "b"]},
      {"type": "dense", "units": 2}]})") == 2.0 * (10 * 4 + 10 * 6 + 10 * 2));
}
