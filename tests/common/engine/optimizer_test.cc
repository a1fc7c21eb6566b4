// Optimizer updates against values computed by hand (an independent float64 implementation of
// the Keras formulas written out in optimizer.h), three steps each.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "common/base/error.h"
#include "common/engine/compute_threads.h"
#include "common/engine/optim/optimizer.h"
#include "common/engine/optim/schedule.h"

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

TEST_CASE("a prologue run block by block inside the update gives the bits of a pass before it") {
  // The trainer's fused tail: the gradient's last pass (here g = raw / 2 + w / 100, reading the
  // parameters as they were) runs on each block just before its update. Every optimizer, weight
  // decay on and off, in place and written elsewhere, one block and several, on one thread and
  // (above the threshold) on every thread; state and results compared bit for bit, 3 steps.
  const auto spec_of = [](OptimizerType type, float momentum, float weight_decay) {
    OptimizerSpec s;
    s.type = type;
    s.momentum = momentum;
    s.nesterov = momentum > 0.0f;
    s.centered = type == OptimizerType::kRmsprop;
    s.weight_decay = weight_decay;
    return s;
  };
  const std::vector<OptimizerSpec> specs = {
      spec_of(OptimizerType::kSgd, 0.0f, 0.0f),      spec_of(OptimizerType::kSgd, 0.9f, 0.01f),
      spec_of(OptimizerType::kAdam, 0.0f, 0.0f),     spec_of(OptimizerType::kAdamW, 0.0f, 0.004f),
      spec_of(OptimizerType::kAdagrad, 0.0f, 0.0f),  spec_of(OptimizerType::kRmsprop, 0.5f, 0.02f)};
  set_compute_threads(2);  // the update's range split over two threads above the threshold
  for (const OptimizerSpec& spec : specs) {
    for (const size_t n : {size_t{100}, size_t{9000}, size_t{200000}}) {
      for (const bool in_place : {true, false}) {
        CAPTURE(optimizer_type_name(spec.type));
        CAPTURE(spec.weight_decay);
        CAPTURE(n);
        CAPTURE(in_place);
        const auto optimizer = optim::make_optimizer(spec);
        std::vector<float> wa(n), wb(n), raw(n);
        for (size_t i = 0; i < n; ++i) wa[i] = wb[i] = static_cast<float>(i % 13) * 0.37f - 2.0f;
        optim::OptimizerState a = optimizer->make_state(n), b = optimizer->make_state(n);
        std::vector<float> out_a(n), out_b(n), ga(n), gb(n);
        for (int step = 0; step < 3; ++step) {
          for (size_t i = 0; i < n; ++i) raw[i] = static_cast<float>((i * 7 + static_cast<size_t>(step)) % 11) - 5.0f;
          for (size_t i = 0; i < n; ++i) ga[i] = raw[i] / 2.0f + wa[i] / 100.0f;
          optimizer->apply(wa, ga, a, in_place ? std::span<float>(wa) : std::span<float>(out_a), 1.0f);
          std::vector<int> calls(n, 0);
          std::vector<int> on_thread(n, -1);
          optimizer->apply(wb, gb, b, in_place ? std::span<float>(wb) : std::span<float>(out_b), 1.0f,
                           [&](int64_t begin, int64_t end) {
                             for (int64_t i = begin; i < end; ++i) {
                               gb[i] = raw[i] / 2.0f + wb[i] / 100.0f;
                               ++calls[i];
#ifdef _OPENMP
                               on_thread[i] = omp_get_thread_num();
#else
                               on_thread[i] = 0;
#endif
                             }
                           });
          CHECK(std::count(calls.begin(), calls.end(), 1) == static_cast<std::ptrdiff_t>(n));
          // Above the threshold the blocks ran on both threads (where OpenMP is built in: the
          // ThreadSanitizer tree has none, and the update runs on one thread there).
#ifdef _OPENMP
          CHECK((on_thread.front() != on_thread.back()) == (n > 100000));
#endif
          CHECK(std::memcmp(ga.data(), gb.data(), n * sizeof(float)) == 0);
          const std::vector<float>& ra = in_place ? wa : out_a;
          const std::vector<float>& rb = in_place ? wb : out_b;
          CHECK(std::memcmp(ra.data(), rb.data(), n * sizeof(float)) == 0);
          REQUIRE(a.slots.size() == b.slots.size());
          for (size_t k = 0; k < a.slots.size(); ++k) {
            CHECK(std::memcmp(a.slots[k].values.data(), b.slots[k].values.data(), n * sizeof(float)) == 0);
          }
          CHECK(a.iterations == b.iterations);
          if (!in_place) {  // the next step starts from the results
            wa = out_a;
            wb = out_b;
          }
        }
      }
    }
  }
  set_compute_threads(0);  // back to one per core, the binary's default
}

// Schedules against Keras' formulas written out independently (Python's math, float64), at steps
// before, on and after their boundaries.
TEST_CASE("learning-rate schedules: exponential decay, piecewise constant, cosine decay with and without warm-up") {
  using Kind = LearningRateSchedule::Kind;
  OptimizerSpec s;
  s.schedule.kind = Kind::kExponentialDecay;
  s.schedule.initial_learning_rate = 0.1;
  s.schedule.decay_steps = 10;
  s.schedule.decay_rate = 0.5;
  CHECK(optim::learning_rate_at(s, 0) == 0.1f);
  CHECK(optim::learning_rate_at(s, 5) == doctest::Approx(0.07071067811865477).epsilon(1e-7));
  CHECK(optim::learning_rate_at(s, 25) == doctest::Approx(0.01767766952966369).epsilon(1e-7));
  s.schedule.staircase = true;
  CHECK(optim::learning_rate_at(s, 5) == 0.1f);
  CHECK(optim::learning_rate_at(s, 10) == 0.05f);
  CHECK(optim::learning_rate_at(s, 25) == 0.025f);

  s.schedule = {};
  s.schedule.kind = Kind::kPiecewiseConstant;
  s.schedule.boundaries = {10, 20};
  s.schedule.values = {0.1, 0.01, 0.001};
  CHECK(optim::learning_rate_at(s, 0) == 0.1f);
  CHECK(optim::learning_rate_at(s, 10) == 0.1f);  // t <= boundary: the value before it (Keras)
  CHECK(optim::learning_rate_at(s, 11) == 0.01f);
  CHECK(optim::learning_rate_at(s, 20) == 0.01f);
  CHECK(optim::learning_rate_at(s, 21) == 0.001f);

  s.schedule = {};
  s.schedule.kind = Kind::kCosineDecay;
  s.schedule.initial_learning_rate = 0.1;
  s.schedule.decay_steps = 100;
  s.schedule.alpha = 0.1;
  CHECK(optim::learning_rate_at(s, 0) == 0.1f);
  CHECK(optim::learning_rate_at(s, 25) == doctest::Approx(0.08681980515339464).epsilon(1e-7));
  CHECK(optim::learning_rate_at(s, 50) == doctest::Approx(0.055).epsilon(1e-7));
  CHECK(optim::learning_rate_at(s, 100) == doctest::Approx(0.01).epsilon(1e-7));
  CHECK(optim::learning_rate_at(s, 150) == optim::learning_rate_at(s, 100));  // held after decay_steps
  s.schedule.initial_learning_rate = 0.0;
  s.schedule.alpha = 0.0;
  s.schedule.warmup_steps = 10;
  s.schedule.warmup_target = 0.2;
  CHECK(optim::learning_rate_at(s, 0) == 0.0f);
  CHECK(optim::learning_rate_at(s, 5) == doctest::Approx(0.1).epsilon(1e-7));
  CHECK(optim::learning_rate_at(s, 10) == doctest::Approx(0.2).epsilon(1e-7));
  CHECK(optim::learning_rate_at(s, 60) == doctest::Approx(0.1).epsilon(1e-7));
  CHECK(optim::learning_rate_at(s, 110) == doctest::Approx(0.0).epsilon(1e-7));
  CHECK(optim::learning_rate_at(s, 500) == optim::learning_rate_at(s, 110));
}

TEST_CASE("sgd with a piecewise schedule: each step's rate is the schedule's at the step before it counts") {
  OptimizerSpec s;
  s.type = OptimizerType::kSgd;
  s.schedule.kind = LearningRateSchedule::Kind::kPiecewiseConstant;
  s.schedule.boundaries = {0};
  s.schedule.values = {0.1, 0.05};  // step 0 (the first update) at 0.1, then 0.05
  check_steps(s, {{0.99, -1.98, 0.47}, {0.9875, -1.985, 0.475}, {1.0025, -1.995, 0.475}});
}

TEST_CASE("a schedule that is constant gives the constant rate's bits (adam, sgd with momentum, adagrad)") {
  for (const OptimizerType type : {OptimizerType::kAdam, OptimizerType::kSgd, OptimizerType::kAdagrad}) {
    OptimizerSpec plain;
    plain.type = type;
    plain.learning_rate = 0.01f;
    plain.momentum = type == OptimizerType::kSgd ? 0.9f : 0.0f;
    OptimizerSpec scheduled = plain;
    scheduled.schedule.kind = LearningRateSchedule::Kind::kPiecewiseConstant;
    scheduled.schedule.boundaries = {1};
    scheduled.schedule.values = {0.01f, 0.01f};  // (the float's value, as a double)
    const auto a = optim::make_optimizer(plain), b = optim::make_optimizer(scheduled);
    std::vector<float> wa = {1.0f, -2.0f, 0.5f}, wb = wa;
    optim::OptimizerState sa = a->make_state(3), sb = b->make_state(3);
    for (const auto& row : kGrads) {
      const std::vector<float> g(row.begin(), row.end());
      a->apply(wa, g, sa);
      b->apply(wb, g, sb);
    }
    CHECK(wa == wb);
  }
}

// RMSprop, AdamW and decoupled weight decay against the same float64 rendering of Keras 3's
// formulas (optimizer.h), three steps each.
TEST_CASE("rmsprop") {
  OptimizerSpec s;
  s.type = OptimizerType::kRmsprop;
  s.learning_rate = 0.01f;
  check_steps(s, {{0.968378804, -1.96837762, 0.468377399},
                  {0.95363525, -1.98312165, 0.47886019},
                  {0.983582738, -2.00528907, 0.47886019}});
}

TEST_CASE("rmsprop with momentum, centered") {
  OptimizerSpec s;
  s.type = OptimizerType::kRmsprop;
  s.learning_rate = 0.01f;
  s.momentum = 0.9f;
  s.centered = true;
  check_steps(s, {{0.966668518, -1.96666713, 0.466666872},
                  {0.920482936, -1.95151523, 0.447320377},
                  {0.909325645, -1.96027245, 0.429908531}});
}

TEST_CASE("adamw: adam with decoupled weight decay 0.004") {
  OptimizerSpec s;
  s.type = OptimizerType::kAdamW;
  s.learning_rate = 0.01f;
  s.weight_decay = 0.004f;
  check_steps(s, {{0.989960316, -1.98992016, 0.489980105},
                  {0.980599185, -1.98717723, 0.485958361},
                  {0.984032162, -1.98982468, 0.482845252}});
}

TEST_CASE("sgd with weight_decay") {
  OptimizerSpec s;
  s.type = OptimizerType::kSgd;
  s.learning_rate = 0.1f;
  s.weight_decay = 0.01f;
  check_steps(s, {{0.989, -1.978, 0.4695}, {0.983011, -1.986022, 0.4790305}, {1.01202799, -2.00403598, 0.47855147}});
}

namespace {

// The optimizers a sparse table may use, each in a form with every slot and option exercised.
std::vector<std::pair<std::string, OptimizerSpec>> row_optimizers() {
  std::vector<std::pair<std::string, OptimizerSpec>> out;
  OptimizerSpec s;
  s.type = OptimizerType::kSgd;
  s.learning_rate = 0.1f;
  out.emplace_back("sgd", s);
  s.momentum = 0.9f;
  s.nesterov = true;
  out.emplace_back("sgd nesterov", s);
  s = OptimizerSpec{};
  s.type = OptimizerType::kAdam;
  s.learning_rate = 0.01f;
  out.emplace_back("adam", s);
  s.type = OptimizerType::kAdamW;
  s.weight_decay = 0.004f;
  out.emplace_back("adamw", s);
  s = OptimizerSpec{};
  s.type = OptimizerType::kAdagrad;
  s.learning_rate = 0.05f;
  out.emplace_back("adagrad", s);
  s = OptimizerSpec{};
  s.type = OptimizerType::kRmsprop;
  s.momentum = 0.5f;
  s.centered = true;
  s.weight_decay = 0.01f;
  out.emplace_back("rmsprop centered with momentum and decay", s);
  return out;
}

std::vector<float> values(size_t n, float scale, float shift) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = scale * static_cast<float>((i * 7919) % 23) / 23.0f + shift;
  return v;
}

}  // namespace

TEST_CASE("row updates - every row listed: apply's bits, step after step, for every optimizer") {
  constexpr size_t kRows = 7, kDim = 5;
  for (const auto& [name, spec] : row_optimizers()) {
    INFO(name);
    const auto optimizer = optim::make_optimizer(spec);
    std::vector<float> dense = values(kRows * kDim, 2.0f, -1.0f), rows = dense;
    optim::OptimizerState dense_state = optimizer->make_state(dense.size()), rows_state = optimizer->make_state(rows.size());
    std::vector<uint32_t> all(kRows);
    for (uint32_t r = 0; r < kRows; ++r) all[r] = r;
    for (int step = 0; step < 4; ++step) {
      const std::vector<float> g = values(kRows * kDim, 0.4f, -0.2f + 0.05f * static_cast<float>(step));
      optimizer->apply(dense, g, dense_state);
      optimizer->apply_rows(rows, kDim, all, g, rows_state);
      CHECK(std::memcmp(dense.data(), rows.data(), dense.size() * sizeof(float)) == 0);
      for (size_t i = 0; i < dense_state.slots.size(); ++i) CHECK(dense_state.slots[i].values == rows_state.slots[i].values);
    }
    CHECK(rows_state.iterations == 4);
  }
}

TEST_CASE("row updates - only the listed rows and their slots change, and a touched row gets apply's value") {
  constexpr size_t kRows = 6, kDim = 4;
  const std::vector<uint32_t> touched = {1, 4};
  for (const auto& [name, spec] : row_optimizers()) {
    INFO(name);
    const auto optimizer = optim::make_optimizer(spec);
    // Two steps of every row first, so that the slots hold something a step would decay.
    std::vector<float> table = values(kRows * kDim, 1.0f, 0.3f);
    optim::OptimizerState state = optimizer->make_state(table.size());
    for (int step = 0; step < 2; ++step) optimizer->apply(table, values(kRows * kDim, 0.5f, -0.25f), state);
    std::vector<float> dense = table;
    optim::OptimizerState dense_state = state;
    std::vector<float> g_dense(kRows * kDim, 0.0f), g_rows;
    for (uint32_t r : touched) {
      for (size_t i = 0; i < kDim; ++i) {
        const float g = 0.1f * static_cast<float>(r + 1) - 0.03f * static_cast<float>(i);
        g_dense[r * kDim + i] = g;
        g_rows.push_back(g);
      }
    }
    optimizer->apply(dense, g_dense, dense_state);
    const std::vector<float> before = table;
    const optim::OptimizerState state_before = state;
    optimizer->apply_rows(table, kDim, touched, g_rows, state);
    CHECK(state.iterations == 3);
    for (size_t r = 0; r < kRows; ++r) {
      const bool is_touched = r == 1 || r == 4;
      for (size_t i = 0; i < kDim; ++i) {
        const size_t at = r * kDim + i;
        INFO("row " << r << " column " << i);
        CHECK(table[at] == (is_touched ? dense[at] : before[at]));
        for (size_t k = 0; k < state.slots.size(); ++k) {
          CHECK(state.slots[k].values[at] == (is_touched ? dense_state.slots[k].values[at] : state_before.slots[k].values[at]));
        }
      }
    }
    // Adagrad and plain SGD without decay are the same lazily or not (a zero gradient moves
    // nothing): the dense update of the zero-padded gradient, every row.
    if (name == "adagrad" || name == "sgd") CHECK(table == dense);
  }
}

TEST_CASE("row updates - lazy Adam by hand: a row's first update is bias-corrected by the table's step count") {
  OptimizerSpec s;
  s.type = OptimizerType::kAdam;
  s.learning_rate = 0.01f;
  const auto optimizer = optim::make_optimizer(s);
  std::vector<float> table = {1.0f, 2.0f};  // 2 rows of 1
  optim::OptimizerState state = optimizer->make_state(2);
  const std::vector<uint32_t> row0 = {0}, row1 = {1};
  optimizer->apply_rows(table, 1, row0, std::vector<float>{0.5f}, state);
  optimizer->apply_rows(table, 1, row1, std::vector<float>{-0.2f}, state);
  // Row 0, t = 1: m = 0.05, v = 0.00025, alpha = 0.01 sqrt(1 - 0.999) / (1 - 0.9).
  const double a1 = 0.01 * std::sqrt(1 - 0.999) / (1 - 0.9);
  CHECK(table[0] == doctest::Approx(1.0 - a1 * 0.05 / (std::sqrt(0.00025) + 1e-7)).epsilon(1e-6));
  // Row 1's first update is at t = 2: m = -0.02, v = 0.00004, alpha with t = 2.
  const double a2 = 0.01 * std::sqrt(1 - 0.999 * 0.999) / (1 - 0.9 * 0.9);
  CHECK(table[1] == doctest::Approx(2.0 - a2 * -0.02 / (std::sqrt(0.00004) + 1e-7)).epsilon(1e-6));
  CHECK(state.iterations == 2);
}

TEST_CASE("row updates - rows out of order or range, or gradients of another size, are refused untouched") {
  OptimizerSpec s;
  s.type = OptimizerType::kAdagrad;
  const auto optimizer = optim::make_optimizer(s);
  std::vector<float> table(12, 1.0f);  // 4 rows of 3
  optim::OptimizerState state = optimizer->make_state(12);
  const std::vector<float> g6(6, 0.5f);
  CHECK_THROWS_WITH_AS(optimizer->apply_rows(table, 3, std::vector<uint32_t>{2, 1}, g6, state),
                       doctest::Contains("not ascending"), Error);
  CHECK_THROWS_WITH_AS(optimizer->apply_rows(table, 3, std::vector<uint32_t>{1, 4}, g6, state),
                       doctest::Contains("not ascending within the table's 4 rows"), Error);
  CHECK_THROWS_WITH_AS(optimizer->apply_rows(table, 3, std::vector<uint32_t>{1}, g6, state),
                       doctest::Contains("6 gradients for 1 rows of 3"), Error);
  CHECK(state.iterations == 0);
  CHECK(table == std::vector<float>(12, 1.0f));
}
