// The update rules of a parameter shard, driven in-process (no RPC): the sync barrier and its
// deterministic reduction, backup workers, async staleness and max_staleness.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <optional>
#include <set>

#include "common/base/error.h"
#include "common/data/job_spec.h"
#include "server/parameter_shard.h"

using namespace pstrain;

namespace {

JobSpec tiny_job(const std::string& training) {
  return parse_job_spec(R"({"dataset": {"name": "mnist10k"},
    "model": {"input_shape": [784], "seed": 3, "layers": [{"type": "dense", "units": 10}]},
    "optimizer": {"type": "sgd", "learning_rate": 0.5},
    "training": )" + training + "}");
}

struct Fixture {
  JobSpec spec;
  std::vector<ChunkInfo> table;
  ParameterShard shard;
  uint32_t key;
  size_t n;

  Fixture(const std::string& training, uint32_t workers)
      : spec(tiny_job(training)),
        table(plan_chunks(make_param_layout(spec.model), 1, 1000)),
        shard(shard_config_of(spec), table, 0, workers),
        key(0),
        n(shard.chunk(0).size()) {}

  std::vector<float> initial() const { return {shard.chunk(key).values.begin(), shard.chunk(key).values.end()}; }
};

struct Reply {
  std::optional<PushOutcome> outcome;
};

PushRequest push(uint32_t key, uint64_t step, uint32_t slice, uint32_t count, uint32_t examples,
                 const std::vector<float>& grad) {
  PushRequest r;
  r.key = key;
  r.step = step;
  r.slice = slice;
  r.slice_count = count;
  r.worker = slice;
  r.examples = examples;
  r.base_version = step;
  r.gradient = grad;
  return r;
}

}  // namespace

TEST_CASE("sync - the update waits for every slice and divides by the step's examples") {
  Fixture f(R"({"mode": "sync", "global_batch_size": 8, "workers": 2})", 2);
  const auto w0 = f.initial();
  std::vector<float> g0(f.n, 3.0f), g1(f.n, 1.0f);
  Reply r0, r1;
  f.shard.push(push(f.key, 0, 0, 2, 6, g0), [&](PushOutcome o) { r0.outcome = o; });
  CHECK_FALSE(r0.outcome.has_value());  // the barrier holds the first push
  CHECK(f.shard.chunk(f.key).version == 0);
  CHECK(f.shard.chunk(f.key).values[0] == w0[0]);
  f.shard.push(push(f.key, 0, 1, 2, 2, g1), [&](PushOutcome o) { r1.outcome = o; });
  REQUIRE(r0.outcome.has_value());
  REQUIRE(r1.outcome.has_value());
  CHECK(r0.outcome->version == 1);
  CHECK(r0.outcome->applied);
  // w -= lr * (3 + 1) / (6 + 2)
  for (size_t i = 0; i < f.n; i += 97) CHECK(f.shard.chunk(f.key).values[i] == doctest::Approx(w0[i] - 0.5f * 0.5f));
}

TEST_CASE("sync - the reduction order is the slice order whatever the arrival order") {
  // Values chosen so that float addition order changes the result.
  std::vector<float> a(1), b(1), c(1);
  a[0] = 1e8f;
  b[0] = 1.0f;
  c[0] = -1e8f;
  auto run = [&](std::vector<int> arrival) {
    Fixture f(R"({"mode": "sync", "global_batch_size": 9, "workers": 3})", 3);
    std::vector<std::vector<float>> grads = {std::vector<float>(f.n, a[0]), std::vector<float>(f.n, b[0]),
                                             std::vector<float>(f.n, c[0])};
    for (int slice : arrival) f.shard.push(push(f.key, 0, static_cast<uint32_t>(slice), 3, 1, grads[slice]), [](PushOutcome) {});
    REQUIRE(f.shard.chunk(f.key).version == 1);
    return f.shard.chunk(f.key).values[5];
  };
  const float in_order = run({0, 1, 2});
  CHECK(run({2, 1, 0}) == in_order);
  CHECK(run({1, 2, 0}) == in_order);
}

TEST_CASE("sync - a pull for the next version waits for the update") {
  Fixture f(R"({"mode": "sync", "global_batch_size": 4, "workers": 2})", 2);
  std::optional<uint64_t> pulled;
  f.shard.pull(f.key, 1, [&](uint64_t v) { pulled = v; });
  CHECK_FALSE(pulled.has_value());
  std::vector<float> g(f.n, 1.0f);
  f.shard.push(push(f.key, 0, 0, 2, 2, g), [](PushOutcome) {});
  CHECK_FALSE(pulled.has_value());
  f.shard.push(push(f.key, 0, 1, 2, 2, g), [](PushOutcome) {});
  REQUIRE(pulled.has_value());
  CHECK(*pulled == 1);
}

TEST_CASE("sync - a push whose caller went away is never read") {
  Fixture f(R"({"mode": "sync", "global_batch_size": 4, "workers": 2})", 2);
  const auto w0 = f.initial();
  std::vector<float> gone(f.n, 1000.0f), g(f.n, 1.0f);
  bool alive = true;
  f.shard.push(push(f.key, 0, 0, 2, 2, gone), [](PushOutcome) { FAIL("a cancelled push was answered"); },
               [&] { return alive; });
  alive = false;  // the RPC was cancelled: its gradient buffer is gone
  gone.assign(f.n, std::nanf(""));
  f.shard.push(push(f.key, 0, 1, 2, 2, g), [](PushOutcome) {});
  CHECK(f.shard.chunk(f.key).version == 0);  // still waiting for slice 0
  std::vector<float> again(f.n, 1.0f);
  f.shard.push(push(f.key, 0, 0, 2, 2, again), [](PushOutcome) {});
  CHECK(f.shard.chunk(f.key).version == 1);
  CHECK(f.shard.chunk(f.key).values[0] == doctest::Approx(w0[0] - 0.5f * 2.0f / 4.0f));
}

TEST_CASE("sync - backup workers apply after N-k pushes and drop the late ones") {
  Fixture f(R"({"mode": "sync", "global_batch_size": 9, "workers": 3, "backup_workers": 1})", 3);
  const auto w0 = f.initial();
  std::vector<float> g(f.n, 2.0f);
  Reply late;
  f.shard.push(push(f.key, 0, 2, 3, 3, g), [](PushOutcome) {});
  f.shard.push(push(f.key, 0, 0, 3, 3, g), [](PushOutcome) {});
  CHECK(f.shard.chunk(f.key).version == 1);  // 2 of 3 were enough
  CHECK(f.shard.chunk(f.key).values[0] == doctest::Approx(w0[0] - 0.5f * 4.0f / 6.0f));
  f.shard.push(push(f.key, 0, 1, 3, 3, g), [&](PushOutcome o) { late.outcome = o; });
  REQUIRE(late.outcome.has_value());
  CHECK_FALSE(late.outcome->applied);
  CHECK(f.shard.chunk(f.key).version == 1);
  CHECK(f.shard.stats().pushes_dropped == 1);
}

TEST_CASE("async - every push applies at once and its staleness is recorded") {
  Fixture f(R"({"mode": "async", "global_batch_size": 4, "workers": 2, "async_lr": "constant"})", 2);
  const auto w0 = f.initial();
  std::vector<float> g(f.n, 1.0f);
  Reply r;
  PushRequest a = push(f.key, 0, 0, 1, 2, g);
  a.base_version = 0;
  f.shard.push(a, [&](PushOutcome o) { r.outcome = o; });
  REQUIRE(r.outcome.has_value());
  CHECK(r.outcome->version == 1);
  CHECK(f.shard.chunk(f.key).values[0] == doctest::Approx(w0[0] - 0.5f * 0.5f));
  PushRequest b = push(f.key, 0, 1, 1, 1, g);  // worker 1, computed on version 0: stale by 1
  b.worker = 1;
  b.base_version = 0;
  f.shard.push(b, [](PushOutcome) {});
  CHECK(f.shard.chunk(f.key).version == 2);
  CHECK(f.shard.chunk(f.key).values[0] == doctest::Approx(w0[0] - 0.25f - 0.5f));
  CHECK(f.shard.stats().max_staleness == 1);
  CHECK(f.shard.stats().staleness_sum == doctest::Approx(1.0));
}

TEST_CASE("async - max_staleness holds a worker that runs too far ahead") {
  Fixture f(R"({"mode": "async", "global_batch_size": 4, "workers": 2, "max_staleness": 1})", 2);
  std::vector<float> g(f.n, 0.1f);
  auto worker_push = [&](uint32_t worker, uint64_t step, Reply& reply) {
    PushRequest r = push(f.key, step, 0, 1, 2, g);
    r.worker = worker;
    f.shard.push(r, [&reply](PushOutcome o) { reply.outcome = o; });
  };
  Reply w0s0, w0s1, w1s0;
  worker_push(0, 0, w0s0);
  CHECK(w0s0.outcome.has_value());  // next step 1 <= slowest (0) + 1
  worker_push(0, 1, w0s1);
  CHECK_FALSE(w0s1.outcome.has_value());  // next step 2 would be 2 ahead of worker 1
  worker_push(1, 0, w1s0);
  CHECK(w1s0.outcome.has_value());
  CHECK(w0s1.outcome.has_value());  // worker 1 caught up: released
  Reply w0s2;
  worker_push(0, 2, w0s2);
  CHECK_FALSE(w0s2.outcome.has_value());
  f.shard.worker_finished(1);  // a finished worker holds nobody back
  CHECK(w0s2.outcome.has_value());
}

TEST_CASE("sync - a slice pushed twice (a takeover) counts once") {
  Fixture f(R"({"mode": "sync", "global_batch_size": 8, "workers": 2})", 2);
  const auto w0 = f.initial();
  std::vector<float> g0(f.n, 3.0f), g1(f.n, 1.0f);
  Reply lost, substitute, survivor;
  // The lost worker's push is still open when a survivor pushes the same slice in its name.
  f.shard.push(push(f.key, 0, 1, 2, 2, g1), [&](PushOutcome o) { lost.outcome = o; });
  f.shard.push(push(f.key, 0, 1, 2, 2, g1), [&](PushOutcome o) { substitute.outcome = o; });
  CHECK_FALSE(lost.outcome.has_value());  // two pushes, one slice: the step still waits
  f.shard.push(push(f.key, 0, 0, 2, 6, g0), [&](PushOutcome o) { survivor.outcome = o; });
  REQUIRE(survivor.outcome.has_value());
  CHECK(substitute.outcome.has_value());
  CHECK(f.shard.chunk(f.key).version == 1);
  // w -= lr * (3 + 1) / (6 + 2): slice 1 summed once, its examples counted once.
  for (size_t i = 0; i < f.n; i += 97) CHECK(f.shard.chunk(f.key).values[i] == doctest::Approx(w0[i] - 0.5f * 0.5f));
}

TEST_CASE("sync - a hold released without a rollback fails the pushes waiting beyond it") {
  Fixture f(R"({"mode": "sync", "global_batch_size": 8, "workers": 1})", 1);
  std::vector<float> g(f.n, 1.0f);
  Reply step0, step1;
  f.shard.holds().settle_from(1);
  f.shard.push(push(f.key, 0, 0, 1, 8, g), [&](PushOutcome o) { step0.outcome = o; });
  REQUIRE(step0.outcome.has_value());  // step 0 is before the hold
  const auto at_hold = f.initial();
  f.shard.push(push(f.key, 1, 0, 1, 8, g), [&](PushOutcome o) { step1.outcome = o; });
  CHECK_FALSE(step1.outcome.has_value());  // held
  f.shard.abort_waiting_and_release_hold(/*min_generation=*/1);
  REQUIRE(step1.outcome.has_value());
  CHECK(step1.outcome->aborted);
  // A push of the old plan (generation 0) that comes late fails too.
  Reply late;
  f.shard.push(push(f.key, 1, 0, 1, 8, g), [&](PushOutcome o) { late.outcome = o; });
  REQUIRE(late.outcome.has_value());
  CHECK(late.outcome->aborted);
  CHECK(f.shard.chunk(f.key).version == 1);  // nothing rolled back, nothing applied
  CHECK(f.initial() == at_hold);
  // The hold is gone: the next plan's push for step 1 applies at once.
  Reply again;
  PushRequest next_plan = push(f.key, 1, 0, 1, 8, g);
  next_plan.generation = 1;
  f.shard.push(next_plan, [&](PushOutcome o) { again.outcome = o; });
  REQUIRE(again.outcome.has_value());
  CHECK(f.shard.chunk(f.key).version == 2);
}

TEST_CASE("sync - a cut mark backs up chunks already at its step and refuses one that came too late") {
  Fixture f(R"({"mode": "sync", "global_batch_size": 8, "workers": 1})", 1);
  std::set<uint64_t> points;
  std::vector<uint64_t> ready;
  f.shard.enable_backups([&](uint64_t v) { return points.count(v) != 0; },
                         [&](uint64_t v, std::vector<ChunkSnapshot> chunks) {
                           CHECK(chunks.size() == f.shard.keys().size());
                           ready.push_back(v);
                         });
  std::vector<std::vector<float>> grads;
  for (uint32_t key : f.shard.keys()) grads.emplace_back(f.shard.chunk(key).size(), 1.0f);
  // One step of every chunk; returns how many pushes were answered.
  auto step = [&](uint64_t s) {
    auto answered = std::make_shared<int>(0);
    size_t k = 0;
    for (uint32_t key : f.shard.keys()) {
      f.shard.push(push(key, s, 0, 1, 8, grads[k++]), [answered](PushOutcome) { ++*answered; });
    }
    return answered;
  };
  const int chunks = static_cast<int>(f.shard.keys().size());
  CHECK(*step(0) == chunks);
  // Marked at 0: the chunks are already past it.
  points.insert(0);
  CHECK_FALSE(f.shard.backup_and_hold_at(0));
  // Marked at 1, where the chunks stand: backed up at once, and held there.
  points.insert(1);
  CHECK(f.shard.backup_and_hold_at(1));
  CHECK(ready == std::vector<uint64_t>{1});
  auto held = step(1);
  CHECK(*held == 0);
  // A mark further ahead replaces the hold: the waiting step applies, up to the new mark.
  points.insert(2);
  CHECK(f.shard.backup_and_hold_at(2));
  CHECK(*held == chunks);
  CHECK(ready == std::vector<uint64_t>{1, 2});
  auto held_again = step(2);
  CHECK(*held_again == 0);
  // Released: nothing holds any more.
  f.shard.release_hold();
  CHECK(*held_again == chunks);
  CHECK(f.shard.chunk(f.key).version == 3);
}

TEST_CASE("sync - a row-sparse push sums exactly like its dense form") {
  // Two shards, the same two steps; in one, slice 1 pushes only the ranges where its gradient is
  // nonzero. The values must agree bit for bit (the sums skip only exact zeros).
  Fixture dense(R"({"mode": "sync", "global_batch_size": 8, "workers": 2})", 2);
  Fixture sparse(R"({"mode": "sync", "global_batch_size": 8, "workers": 2})", 2);
  std::vector<float> g0(dense.n), g1(dense.n, 0.0f);
  for (size_t i = 0; i < dense.n; ++i) g0[i] = std::sin(static_cast<float>(i)) * 1e-3f;
  const std::vector<ChunkRange> ranges = {{2, 6}, {100, 40}, {dense.n - 10, 10}};
  for (const ChunkRange& r : ranges) {
    for (size_t i = r.offset; i < r.offset + r.size; ++i) g1[i] = std::cos(static_cast<float>(i)) * 1e-3f;
  }
  for (uint64_t step = 0; step < 2; ++step) {
    Reply d0, d1, s0, s1;
    dense.shard.push(push(dense.key, step, 0, 2, 5, g0), [&](PushOutcome o) { d0.outcome = o; });
    dense.shard.push(push(dense.key, step, 1, 2, 3, g1), [&](PushOutcome o) { d1.outcome = o; });
    PushRequest p = push(sparse.key, step, 1, 2, 3, {});
    p.sparse = true;
    for (const ChunkRange& r : ranges) p.parts.push_back({r.offset, {g1.data() + r.offset, r.size}});
    sparse.shard.push(p, [&](PushOutcome o) { s1.outcome = o; });
    CHECK_FALSE(s1.outcome.has_value());  // a sparse push waits at the barrier like any other
    sparse.shard.push(push(sparse.key, step, 0, 2, 5, g0), [&](PushOutcome o) { s0.outcome = o; });
    REQUIRE(s0.outcome.has_value());
    REQUIRE(s1.outcome.has_value());
    const auto a = dense.shard.chunk(dense.key).values, b = sparse.shard.chunk(sparse.key).values;
    CHECK(std::equal(a.begin(), a.end(), b.begin(), b.end()));
  }
}

TEST_CASE("sync - the values before the last update stay readable for a takeover") {
  Fixture f(R"({"mode": "sync", "global_batch_size": 8, "workers": 1})", 1);
  const auto w0 = f.initial();
  std::vector<float> g(f.n, 1.0f);
  f.shard.push(push(f.key, 0, 0, 1, 1, g), [](PushOutcome) {});
  REQUIRE(f.shard.chunk(f.key).version == 1);
  const auto w1 = f.initial();
  REQUIRE(f.shard.chunk(f.key).values_at(0).has_value());
  CHECK(std::equal(w0.begin(), w0.end(), f.shard.chunk(f.key).values_at(0)->begin()));
  CHECK(std::equal(w1.begin(), w1.end(), f.shard.chunk(f.key).values_at(1)->begin()));
  f.shard.push(push(f.key, 1, 0, 1, 1, g), [](PushOutcome) {});
  CHECK_FALSE(f.shard.chunk(f.key).values_at(0).has_value());  // two updates back: gone
  CHECK(std::equal(w1.begin(), w1.end(), f.shard.chunk(f.key).values_at(1)->begin()));
  CHECK_FALSE(f.shard.chunk(f.key).values_at(3).has_value());  // not there yet
  f.shard.reset();
  CHECK_FALSE(f.shard.chunk(f.key).values_at(1).has_value());  // a rollback forgets the old timeline
  CHECK(f.shard.chunk(f.key).values_at(0).has_value());
}

namespace {

// Factors of a 3-example push over kernel rows {1, 5, 6, 50, 200} of the tiny job's 784 x 10
// kernel, and the dense gradient of the chunk holding rows [first, first + rows) they stand for.
struct Factors {
  std::shared_ptr<GradientFactors> factors = std::make_shared<GradientFactors>();
  std::vector<float> deltas, inputs;

  Factors() {
    factors->columns = 10;
    factors->examples = 3;
    factors->rows = {1, 5, 6, 50, 200};
    for (size_t i = 0; i < 30; ++i) deltas.push_back(std::sin(static_cast<float>(i)) * 0.1f);
    for (size_t i = 0; i < 15; ++i) inputs.push_back(std::cos(static_cast<float>(i)));
    factors->deltas = deltas;
    factors->inputs = inputs;
  }
  std::vector<float> dense(size_t first, size_t rows) const {
    std::vector<float> g(rows * 10, 0.0f);
    for (size_t i = 0; i < factors->rows.size(); ++i) {
      const size_t r = factors->rows[i];
      if (r < first || r >= first + rows) continue;
      for (size_t c = 0; c < 10; ++c) {
        for (size_t b = 0; b < 3; ++b) g[(r - first) * 10 + c] += inputs[b * 5 + i] * deltas[b * 10 + c];
      }
    }
    return g;
  }
};

}  // namespace

TEST_CASE("a factored push applies like its dense form, in sync and in async mode") {
  const Factors f;
  for (const char* training : {R"({"mode": "sync", "global_batch_size": 8, "workers": 2})",
                               R"({"mode": "async", "global_batch_size": 8, "workers": 2})"}) {
    CAPTURE(training);
    Fixture dense(training, 2), factored(training, 2);
    REQUIRE(factored.shard.chunk(factored.key).row_columns == 10);
    const size_t first = factored.shard.chunk(factored.key).first_row(), rows = factored.n / 10;
    REQUIRE(first == 0);
    REQUIRE(rows > 50);
    REQUIRE(rows <= 200);  // row 200 lies in another chunk: ignored here
    const std::vector<float> g0 = f.dense(first, rows);
    std::vector<float> g1(dense.n);
    for (size_t i = 0; i < dense.n; ++i) g1[i] = std::cos(static_cast<float>(i)) * 1e-2f;
    for (uint64_t step = 0; step < 2; ++step) {
      Reply d0, d1, f0, f1;
      dense.shard.push(push(dense.key, step, 0, 2, 3, g0), [&](PushOutcome o) { d0.outcome = o; });
      dense.shard.push(push(dense.key, step, 1, 2, 5, g1), [&](PushOutcome o) { d1.outcome = o; });
      PushRequest p = push(factored.key, step, 0, 2, 3, {});
      p.factors = f.factors;
      factored.shard.push(p, [&](PushOutcome o) { f0.outcome = o; });
      factored.shard.push(push(factored.key, step, 1, 2, 5, g1), [&](PushOutcome o) { f1.outcome = o; });
      REQUIRE(f0.outcome.has_value());
      REQUIRE(f1.outcome.has_value());
      CHECK(f0.outcome->applied);
      CHECK(factored.shard.chunk(factored.key).version == dense.shard.chunk(dense.key).version);
      const auto a = dense.shard.chunk(dense.key).values, b = factored.shard.chunk(factored.key).values;
      for (size_t i = 0; i < a.size(); ++i) REQUIRE(b[i] == doctest::Approx(a[i]).epsilon(1e-6));
    }
  }
}

TEST_CASE("sync - a factored push with no rows in the chunk, or no examples, adds nothing") {
  // Row 200 lies in another chunk; the other push has no examples at all (an empty slice).
  for (const bool no_examples : {false, true}) {
    CAPTURE(no_examples);
    Fixture dense(R"({"mode": "sync", "global_batch_size": 8, "workers": 2})", 2);
    Fixture factored(R"({"mode": "sync", "global_batch_size": 8, "workers": 2})", 2);
    const std::vector<float> zero(dense.n, 0.0f), deltas(30, 0.25f), inputs(3, 1.0f);
    auto f = std::make_shared<GradientFactors>();
    f->columns = 10;
    f->examples = no_examples ? 0 : 3;
    if (!no_examples) {
      f->rows = {200};
      f->deltas = deltas;
      f->inputs = inputs;
    }
    std::vector<float> g1(dense.n);
    for (size_t i = 0; i < dense.n; ++i) g1[i] = std::cos(static_cast<float>(i)) * 1e-2f;
    Reply d0, d1, f0, f1;
    dense.shard.push(push(dense.key, 0, 0, 2, f->examples, zero), [&](PushOutcome o) { d0.outcome = o; });
    dense.shard.push(push(dense.key, 0, 1, 2, 5, g1), [&](PushOutcome o) { d1.outcome = o; });
    PushRequest p = push(factored.key, 0, 0, 2, static_cast<uint32_t>(f->examples), {});
    p.factors = f;
    factored.shard.push(p, [&](PushOutcome o) { f0.outcome = o; });
    factored.shard.push(push(factored.key, 0, 1, 2, 5, g1), [&](PushOutcome o) { f1.outcome = o; });
    REQUIRE(f0.outcome.has_value());
    REQUIRE(f1.outcome.has_value());
    const auto a = dense.shard.chunk(dense.key).values, b = factored.shard.chunk(factored.key).values;
    CHECK(std::equal(a.begin(), a.end(), b.begin(), b.end()));
  }
}

// --- Staleness-aware async (training.async_lr "staleness"): lr / max(1, t), hand-computed -----

namespace {

JobSpec job_with(const std::string& optimizer, const std::string& training) {
  return parse_job_spec(R"({"dataset": {"name": "mnist10k"},
    "model": {"input_shape": [784], "seed": 3, "layers": [{"type": "dense", "units": 10}]},
    "optimizer": )" + optimizer + R"(, "training": )" + training + "}");
}

// One chunk, three async workers; pushes of a constant gradient on chosen base versions.
struct AsyncFixture {
  JobSpec spec;
  std::vector<ChunkInfo> table;
  ParameterShard shard;
  size_t n;
  std::vector<float> w0;

  AsyncFixture(const std::string& optimizer, const std::string& async_lr)
      : spec(job_with(optimizer, R"({"mode": "async", "global_batch_size": 3, "workers": 3, "async_lr": ")" +
                                     async_lr + R"("})")),
        table(plan_chunks(make_param_layout(spec.model), 1, 1000)),
        shard(shard_config_of(spec), table, 0, 3),
        n(shard.chunk(0).size()),
        w0(shard.chunk(0).values.begin(), shard.chunk(0).values.end()) {}

  // A push of gradient sum `g` (every element) over `examples` examples, computed on `base`.
  void push_on(uint32_t worker, uint64_t base, float g, uint32_t examples = 1) {
    std::vector<float> grad(n, g);
    PushRequest r = push(0, base, 0, 1, examples, grad);
    r.worker = worker;
    r.base_version = base;
    bool done = false;
    shard.push(r, [&](PushOutcome) { done = true; });
    REQUIRE(done);
  }
  double moved(size_t i) const { return static_cast<double>(w0[i]) - shard.chunk(0).values[i]; }
};

}  // namespace

TEST_CASE("async_lr staleness - SGD: each push's step is lr * g / max(1, staleness)") {
  AsyncFixture f(R"({"type": "sgd", "learning_rate": 0.5})", "staleness");
  f.push_on(0, 0, 1.0f);  // t = 0: 0.5
  f.push_on(1, 0, 1.0f);  // t = 1: 0.5
  f.push_on(2, 0, 1.0f);  // t = 2: 0.25
  f.push_on(0, 1, 1.0f);  // t = 2: 0.25
  f.push_on(1, 0, 1.0f);  // t = 4: 0.125
  CHECK(f.shard.stats().max_staleness == 4);
  for (size_t i = 0; i < f.n; i += 101) CHECK(f.moved(i) == doctest::Approx(0.5 + 0.5 + 0.25 + 0.25 + 0.125).epsilon(1e-5));

  AsyncFixture c(R"({"type": "sgd", "learning_rate": 0.5})", "constant");
  c.push_on(0, 0, 1.0f);
  c.push_on(1, 0, 1.0f);
  c.push_on(2, 0, 1.0f);
  c.push_on(0, 1, 1.0f);
  c.push_on(1, 0, 1.0f);
  for (size_t i = 0; i < c.n; i += 101) CHECK(c.moved(i) == doctest::Approx(5 * 0.5).epsilon(1e-5));
}

TEST_CASE("async_lr staleness - momentum: the gradient's contribution to the velocity is scaled, not its decay") {
  AsyncFixture f(R"({"type": "sgd", "learning_rate": 0.1, "momentum": 0.9})", "staleness");
  f.push_on(0, 0, 1.0f);  // t = 0: m = -0.1
  f.push_on(1, 0, 1.0f);  // t = 1: m = 0.9 * -0.1 - 0.1 = -0.19
  f.push_on(2, 0, 1.0f);  // t = 2: m = 0.9 * -0.19 - 0.1 / 2 = -0.221
  f.push_on(0, 0, 1.0f);  // t = 3: m = 0.9 * -0.221 - 0.1 / 3 = -0.23223...
  const double m3 = 0.9 * -0.221 - 0.1 / 3;
  for (size_t i = 0; i < f.n; i += 101) CHECK(f.moved(i) == doctest::Approx(0.1 + 0.19 + 0.221 - m3).epsilon(1e-5));
  // Scaling the whole step (velocity included) would move 0.1 + 0.19 + 0.271 / 2 + ...: different.
  // Nesterov: w += momentum * m - lr * s * g.
  AsyncFixture nes(R"({"type": "sgd", "learning_rate": 0.1, "momentum": 0.9, "nesterov": true})", "staleness");
  nes.push_on(0, 0, 1.0f);  // m = -0.1; w += 0.9 * -0.1 - 0.1 = -0.19
  nes.push_on(1, 0, 1.0f);  // m = -0.19; w += 0.9 * -0.19 - 0.1 = -0.271
  nes.push_on(2, 0, 1.0f);  // t = 2: m = -0.221; w += 0.9 * -0.221 - 0.05 = -0.2489
  for (size_t i = 0; i < nes.n; i += 101) CHECK(nes.moved(i) == doctest::Approx(0.19 + 0.271 + 0.2489).epsilon(1e-5));
}

TEST_CASE("async_lr staleness - Adam: the step is scaled, the moments keep the unscaled gradient") {
  AsyncFixture f(R"({"type": "adam", "learning_rate": 0.1, "beta_1": 0.9, "beta_2": 0.999, "epsilon": 1e-7})",
                 "staleness");
  // Gradients 1, 1, 2; the third computed on version 0 when the chunk is at 2 (t = 2: half the step).
  f.push_on(0, 0, 1.0f);
  f.push_on(1, 1, 1.0f);  // t = 0
  f.push_on(2, 0, 2.0f);  // t = 2
  double m = 0, v = 0, moved = 0;
  const double lr = 0.1, b1 = 0.9, b2 = 0.999, eps = 1e-7;
  const double grads[] = {1, 1, 2}, scales[] = {1, 1, 0.5};
  for (int t = 1; t <= 3; ++t) {
    const double g = grads[t - 1];
    m += (g - m) * (1 - b1);
    v += (g * g - v) * (1 - b2);
    const double alpha = lr * std::sqrt(1 - std::pow(b2, t)) / (1 - std::pow(b1, t));
    moved += scales[t - 1] * alpha * m / (std::sqrt(v) + eps);
  }
  // Scaling the gradient into m and v instead would leave Adam's step almost unchanged (it is
  // invariant to the gradient's scale), and scaling nothing gives 2.5 * 0.1-ish: both differ.
  for (size_t i = 0; i < f.n; i += 101) CHECK(f.moved(i) == doctest::Approx(moved).epsilon(1e-4));
  CHECK(moved < 0.27);  // the third step is about half of lr
  // The slots hold the unscaled gradient's moments.
  const auto snapshots = f.shard.snapshot_each();
  const auto chunk0 = std::find_if(snapshots.begin(), snapshots.end(), [](const ChunkSnapshot& s) { return s.key == 0; });
  REQUIRE(chunk0 != snapshots.end());
  CHECK(chunk0->optimizer_state.slots[0].values[0] == doctest::Approx(m).epsilon(1e-5));
  CHECK(chunk0->optimizer_state.slots[1].values[0] == doctest::Approx(v).epsilon(1e-5));
}

TEST_CASE("async_lr staleness - Adagrad: the step is scaled, the accumulator keeps g^2") {
  AsyncFixture f(R"({"type": "adagrad", "learning_rate": 0.1, "initial_accumulator_value": 0.1})", "staleness");
  f.push_on(0, 0, 1.0f);
  f.push_on(1, 0, 1.0f);  // t = 1
  f.push_on(2, 0, 1.0f);  // t = 2
  const double eps = 1e-7;
  const double moved = 0.1 / (std::sqrt(1.1) + eps) + 0.1 / (std::sqrt(2.1) + eps) + 0.05 / (std::sqrt(3.1) + eps);
  for (size_t i = 0; i < f.n; i += 101) CHECK(f.moved(i) == doctest::Approx(moved).epsilon(1e-5));
}

// --- async_lr "batch_staleness": lr * (examples / global_batch_size) / max(1, t), hand-computed --

TEST_CASE("async_lr batch_staleness - SGD: a push moves lr * (its examples / global batch) / max(1, t) times its mean gradient") {
  AsyncFixture f(R"({"type": "sgd", "learning_rate": 0.6})", "batch_staleness");  // global batch 3
  f.push_on(0, 0, 1.0f);        // 1 of 3 examples, t = 0: 0.6 / 3 = 0.2
  f.push_on(1, 0, 1.0f);        // t = 1: 0.2
  f.push_on(2, 0, 1.0f);        // t = 2: 0.1
  f.push_on(0, 0, 1.0f);        // t = 3: 0.2 / 3
  f.push_on(1, 4, 3.0f, 3);     // the whole global batch (mean gradient 1) on the current values: 0.6,
                                // exactly a sync step
  CHECK(f.shard.stats().max_staleness == 3);
  const double expected = 0.2 + 0.2 + 0.1 + 0.2 / 3 + 0.6;
  for (size_t i = 0; i < f.n; i += 101) CHECK(f.moved(i) == doctest::Approx(expected).epsilon(1e-5));
  // `staleness` alone would move 0.6 + 0.6 + 0.3 + 0.2 + 0.6, `constant` 5 * 0.6.
  AsyncFixture s(R"({"type": "sgd", "learning_rate": 0.6})", "staleness");
  s.push_on(0, 0, 1.0f);
  s.push_on(1, 0, 1.0f);
  s.push_on(2, 0, 1.0f);
  for (size_t i = 0; i < s.n; i += 101) CHECK(s.moved(i) == doctest::Approx(0.6 + 0.6 + 0.3).epsilon(1e-5));
}

TEST_CASE("async_lr batch_staleness - momentum: the same factor - Adam: the square root of the batch share") {
  AsyncFixture f(R"({"type": "sgd", "learning_rate": 0.3, "momentum": 0.9})", "batch_staleness");
  f.push_on(0, 0, 1.0f);  // t = 0: m = -0.3 / 3 = -0.1
  f.push_on(1, 0, 1.0f);  // t = 1: m = 0.9 * -0.1 - 0.1 = -0.19
  f.push_on(2, 0, 1.0f);  // t = 2: m = 0.9 * -0.19 - 0.1 / 2 = -0.221
  for (size_t i = 0; i < f.n; i += 101) CHECK(f.moved(i) == doctest::Approx(0.1 + 0.19 + 0.221).epsilon(1e-5));
  // Adam's exponent is 0.5 (the square-root rule): s = sqrt(1 / 3) / max(1, t). Its first step
  // is lr * s (m / sqrt(v) = 1 after bias correction, eps aside): 0.3 * 0.57735 = 0.173205; the
  // second, of the same gradient on version 0 (t = 1), the same again; the third (t = 2) half.
  AsyncFixture a(R"({"type": "adam", "learning_rate": 0.3, "epsilon": 1e-7})", "batch_staleness");
  a.push_on(0, 0, 1.0f);
  for (size_t i = 0; i < a.n; i += 101) CHECK(a.moved(i) == doctest::Approx(0.3 * std::sqrt(1.0 / 3)).epsilon(1e-4));
  a.push_on(1, 0, 1.0f);
  a.push_on(2, 0, 1.0f);
  for (size_t i = 0; i < a.n; i += 101) {
    CHECK(a.moved(i) == doctest::Approx(0.3 * std::sqrt(1.0 / 3) * 2.5).epsilon(1e-4));
  }
  const auto snapshots = a.shard.snapshot_each();
  REQUIRE(!snapshots.empty());
  // m holds the unscaled gradient's average: 1 - 0.9^3.
  CHECK(snapshots.front().optimizer_state.slots[0].values[0] == doctest::Approx(0.271).epsilon(1e-5));
}

TEST_CASE("async_lr - sync mode rejects it - unknown values name the field") {
  CHECK_THROWS_WITH_AS(job_with(R"({"type": "sgd"})",
                                R"({"mode": "sync", "global_batch_size": 4, "async_lr": "staleness"})"),
                       doctest::Contains("/training/async_lr"), SpecError);
  CHECK_THROWS_WITH_AS(job_with(R"({"type": "sgd"})",
                                R"({"mode": "async", "global_batch_size": 4, "async_lr": "stale"})"),
                       doctest::Contains("/training/async_lr"), SpecError);
  CHECK_THROWS_WITH_AS(job_with(R"({"type": "sgd"})", R"({"global_batch_size": 4, "on_divergence": "stop"})"),
                       doctest::Contains("/training/on_divergence"), SpecError);
  const JobSpec a = job_with(R"({"type": "sgd"})", R"({"mode": "async", "global_batch_size": 4, "async_lr": "constant",
                                                       "on_divergence": "fail"})");
  CHECK(a.training.async_lr == AsyncLr::kConstant);
  CHECK(a.training.on_divergence == OnDivergence::kFail);
  // The canonical text keeps them, and reads back the same.
  const JobSpec again = parse_job_spec(job_spec_to_json(a));
  CHECK(again.training.async_lr == AsyncLr::kConstant);
  CHECK(again.training.on_divergence == OnDivergence::kFail);
  // The default (what a spec without the field runs with) is batch_staleness.
  CHECK(job_with(R"({"type": "sgd"})", R"({"mode": "async", "global_batch_size": 4})").training.async_lr ==
        AsyncLr::kBatchStaleness);
  for (const char* name : {"constant", "staleness", "batch_staleness"}) {
    const JobSpec j = job_with(R"({"type": "sgd"})", std::string(R"({"mode": "async", "global_batch_size": 4, "async_lr": ")") +
                                                         name + R"("})");
    CHECK(std::string(async_lr_name(j.training.async_lr)) == name);
    CHECK(std::string(async_lr_name(parse_job_spec(job_spec_to_json(j)).training.async_lr)) == name);
  }
}

TEST_CASE("sync - workers' compression states go into the backup of the version their step makes, and come back with a restore") {
  Fixture f(R"({"mode": "sync", "global_batch_size": 8, "workers": 2})", 2);
  std::vector<std::pair<uint64_t, std::vector<ChunkSnapshot>>> backups;
  f.shard.enable_backups([](uint64_t v) { return v == 2; },
                         [&](uint64_t v, std::vector<ChunkSnapshot> chunks) { backups.emplace_back(v, std::move(chunks)); });
  const std::vector<float> g(f.n, 1.0f), state0{1.0f, 2.0f, 3.0f}, state1{-4.0f};
  // Every chunk, one step of both slices; slice 1 sends its state first (arrival order differs
  // from slice order), slice 0 only with `with_state`.
  auto step = [&](uint64_t s, bool with_state) {
    for (uint32_t key : f.shard.keys()) {
      const std::vector<float> grad(f.shard.chunk(key).size(), 1.0f);
      PushRequest p1 = push(key, s, 1, 2, 4, grad), p0 = push(key, s, 0, 2, 4, grad);
      p1.worker_state = state1;
      if (with_state) p0.worker_state = state0;
      f.shard.push(p1, [](PushOutcome) {});
      f.shard.push(p0, [](PushOutcome) {});
    }
  };
  step(0, false);
  // Version 1: slice 1's state (the states of the step that made the version), none of slice 0.
  REQUIRE(f.shard.chunk(f.key).state_of(1) != nullptr);
  CHECK(*f.shard.chunk(f.key).state_of(1) == state1);
  CHECK(f.shard.chunk(f.key).state_of(0) == nullptr);
  step(1, true);
  REQUIRE(backups.size() == 1);
  CHECK(backups[0].first == 2);
  std::map<uint32_t, ChunkSnapshot> restored;
  for (ChunkSnapshot& c : backups[0].second) {
    CHECK(c.worker_state.size() == 2);
    CHECK(c.worker_state.at(0) == state0);
    CHECK(c.worker_state.at(1) == state1);
    restored[c.key] = std::move(c);
  }
  // The next step without states: version 3 has none.
  step(2, false);
  CHECK(f.shard.chunk(f.key).version == 3);
  CHECK(f.shard.chunk(f.key).state_of(0) == nullptr);
  // Restored to version 2: its states are back for a new session's pull.
  f.shard.restore(restored);
  CHECK(f.shard.chunk(f.key).version == 2);
  REQUIRE(f.shard.chunk(f.key).state_of(0) != nullptr);
  CHECK(*f.shard.chunk(f.key).state_of(0) == state0);
  f.shard.reset();
  CHECK(f.shard.chunk(f.key).state_of(1) == nullptr);
}
