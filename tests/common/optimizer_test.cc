// Optimizer updates against values computed by hand (an independent float64 implementation of
// the Keras formulas written out in optimizer.h), three steps each.
#include <doctest/doctest.h>

#include "common/engine/optim/optimizer.h"

using namespace pstrain;

namespace {

using Rows = std::vector<std::vector<double>>;

const Rows kGrads = {{0.1, -0.2, 0.3}, {0.05, 0.1, -0.1}, {-0.3, 0.2, 0.0}};

void check_steps(const OptimizerSpec& spec, const Rows& expected) {
  const auto optimizer = optim::make_optimizer(spec);
  std::vector<float> w = {1.0f, -2.0f, 0.5f};
  optim::OptimizerState state = optimizer->make_state(w.size());
  for (size_t step = 0; step < kGrads.size(); ++step) {
    std::vector<float> g(kGrads[step].begin(), kGrads[step].end());
    optimizer->apply(w, g, state);
    for (size_t i = 0; i < w.size(); ++i) {
      INFO("step " << step + 1 << " parameter " << i);
      CHECK(w[i] == doctest::Approx(expected[step][i]).epsilon(1e-6));
    }
  }
  CHECK(state.iterations == 3);
}

}  // namespace

TEST_CASE("sgd") {
  OptimizerSpec s;
  s.type = OptimizerType::kSgd;
  s.learning_rate = 0.1f;
  check_steps(s, {{0.99, -1.98, 0.47}, {0.985, -1.99, 0.48}, {1.015, -2.01, 0.48}});
}

TEST_CASE("sgd with momentum") {
  OptimizerSpec s;
  s.type = OptimizerType::kSgd;
  s.learning_rate = 0.1f;
  s.momentum = 0.9f;
  check_steps(s, {{0.99, -1.98, 0.47}, {0.976, -1.972, 0.453}, {0.9934, -1.9848, 0.4377}});
}

TEST_CASE("sgd with nesterov momentum") {
  OptimizerSpec s;
  s.type = OptimizerType::kSgd;
  s.learning_rate = 0.1f;
  s.momentum = 0.9f;
  s.nesterov = true;
  check_steps(s, {{0.981, -1.962, 0.443}, {0.9634, -1.9648, 0.4377}, {1.00906, -1.99632, 0.42393}});
}

TEST_CASE("adam") {
  OptimizerSpec s;
  s.type = OptimizerType::kAdam;
  s.learning_rate = 0.01f;
  // Step 1 is lr * g / |g| (bias-corrected m / sqrt(v)), so each weight moves by about 0.01.
  check_steps(s, {{0.990000316, -1.99000016, 0.490000105},
                  {0.980678784, -1.98733683, 0.48599796},
                  {0.984150984, -1.99006376, 0.48290429}});
}

TEST_CASE("adagrad") {
  OptimizerSpec s;
  s.type = OptimizerType::kAdagrad;
  s.learning_rate = 0.1f;
  check_steps(s, {{0.969848875, -1.94654777, 0.431175296},
                  {0.954941759, -1.97236765, 0.45353597},
                  {1.02160841, -2.01825078, 0.45353597}});
}

TEST_CASE("slots are exposed by name for backups") {
  OptimizerSpec s;
  s.type = OptimizerType::kAdam;
  const auto optimizer = optim::make_optimizer(s);
  optim::OptimizerState state = optimizer->make_state(4);
  REQUIRE(state.find("m") != nullptr);
  REQUIRE(state.find("v") != nullptr);
  CHECK(state.find("m")->values.size() == 4);
  CHECK(state.find("accumulator") == nullptr);
  s.type = OptimizerType::kAdagrad;
  s.initial_accumulator_value = 0.25f;
  CHECK(optim::make_optimizer(s)->make_state(2).find("accumulator")->values == std::vector<float>{0.25f, 0.25f});
}

TEST_CASE("batch size exponent - linear for SGD with or without momentum, square root for Adam and Adagrad") {
  OptimizerSpec s;
  s.type = OptimizerType::kSgd;
  CHECK(optim::make_optimizer(s)->batch_size_exponent() == 1.0);
  s.momentum = 0.9f;
  CHECK(optim::make_optimizer(s)->batch_size_exponent() == 1.0);
  s.type = OptimizerType::kAdam;
  CHECK(optim::make_optimizer(s)->batch_size_exponent() == 0.5);
  s.type = OptimizerType::kAdagrad;
  CHECK(optim::make_optimizer(s)->batch_size_exponent() == 0.5);
}

TEST_CASE("a large range updates identically in the parallel path") {
  OptimizerSpec s;
  s.type = OptimizerType::kAdam;
  const auto optimizer = optim::make_optimizer(s);
  const size_t n = 200000;  // above the threshold for OpenMP
  std::vector<float> w(n, 1.0f), g(n);
  for (size_t i = 0; i < n; ++i) g[i] = static_cast<float>(i % 7) - 3.0f;
  optim::OptimizerState state = optimizer->make_state(n);
  optimizer->apply(w, g, state);
  for (size_t i = 0; i < n; i += 9973) {
    const float expected = g[i] == 0 ? 1.0f : (g[i] > 0 ? 0.999f : 1.001f);
    CHECK(w[i] == doctest::Approx(expected).epsilon(1e-5));
  }
}

TEST_CASE("an update written elsewhere equals the in-place one and leaves the old values") {
  for (const OptimizerType type : {OptimizerType::kSgd, OptimizerType::kAdam, OptimizerType::kAdagrad}) {
    OptimizerSpec s;
    s.type = type;
    s.momentum = type == OptimizerType::kSgd ? 0.9f : 0.0f;
    const auto optimizer = optim::make_optimizer(s);
    std::vector<float> in_place = {1.0f, -2.0f, 0.5f}, old = in_place, out(3);
    optim::OptimizerState a = optimizer->make_state(3), b = optimizer->make_state(3);
    for (const auto& row : kGrads) {
      const std::vector<float> g(row.begin(), row.end());
      optimizer->apply(in_place, g, a);
      optimizer->apply(old, g, b, out);
      const std::vector<float> before = old;
      CHECK(out == in_place);  // bit for bit
      old = out;
      CHECK(before != out);  // the update did change something, elsewhere
    }
  }
}
