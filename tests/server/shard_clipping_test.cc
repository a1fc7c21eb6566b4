// Gradient clipping (optimizer.clipnorm / global_clipnorm): the norms and factors by hand, the
// standalone trainer's clip of a flat gradient, and a parameter shard holding a sync step until
// a pull brings the factor (docs/DESIGN-NOTES.md "Gradient clipping").
#include <doctest/doctest.h>

#include <cmath>
#include <optional>
#include <vector>

#include "common/base/error.h"
#include "common/data/job_spec.h"
#include "common/engine/model_spec.h"
#include "common/engine/nn/gradient_clipping.h"
#include "server/parameter_shard.h"

using namespace pstrain;

namespace {

OptimizerSpec clipping(float clipnorm, float global_clipnorm) {
  OptimizerSpec o;
  o.clipnorm = clipnorm;
  o.global_clipnorm = global_clipnorm;
  return o;
}

ChunkInfo chunk(uint32_t key, uint32_t param, size_t offset, size_t size) { return {key, param, offset, size, 0, 0}; }

}  // namespace

TEST_CASE("clipping - factors by hand: global over every chunk, clipnorm per tensor over its chunks") {
  CHECK(nn::sum_of_squares(std::vector<float>{3, 4}.data(), 2) == 25.0);
  // Tensor 0 in two chunks (sums 9 and 16: norm 5), tensor 1 in one (sum 144: norm 12). Given out
  // of key order: the result does not depend on it.
  const std::vector<ChunkInfo> chunks = {chunk(2, 1, 0, 1), chunk(0, 0, 0, 1), chunk(1, 0, 1, 1)};
  const std::vector<double> sums = {144, 9, 16};
  // global: norm 13; limit 6.5 halves everything; a limit above 13 changes nothing.
  auto f = nn::clip_factors(clipping(0, 6.5f), chunks, sums);
  CHECK(f == std::vector<float>{0.5f, 0.5f, 0.5f});
  CHECK(nn::clip_factors(clipping(0, 13.0f), chunks, sums) == std::vector<float>{1, 1, 1});
  // per tensor, limit 6: tensor 1 (12) halved, tensor 0 (5) untouched.
  f = nn::clip_factors(clipping(6.0f, 0), chunks, sums);
  CHECK(f == std::vector<float>{0.5f, 1.0f, 1.0f});
  // The factor is limit / norm rounded once to float.
  f = nn::clip_factors(clipping(0, 1.0f), chunks, sums);
  CHECK(f[0] == static_cast<float>(1.0 / 13.0));
}

TEST_CASE("clipping - the standalone trainer's clip of a flat gradient, by hand") {
  // dense 2 -> 1: kernel [2, 1] and bias [1]; a gradient of kernel (3, 4), bias 12: global norm 13.
  const ModelSpec model = parse_accepted_job_spec(R"({"dataset": {"name": "any"},
    "model": {"input_shape": [2], "layers": [{"type": "dense", "units": 1}]},
    "optimizer": {"type": "sgd"}, "training": {"global_batch_size": 8}})").model;
  const ParamLayout layout = make_param_layout(model);
  REQUIRE(layout.params().size() == 2);
  const size_t kernel = layout.params()[0].offset, bias = layout.params()[1].offset;  // (tensors are aligned)
  const std::vector<ChunkInfo> chunks = plan_chunks(layout, 1);
  const auto clipped = [&](const OptimizerSpec& o) {
    std::vector<float> g(layout.total_size(), 0.0f);
    g[kernel] = 3;
    g[kernel + 1] = 4;
    g[bias] = 12;
    nn::clip_gradient(o, layout, chunks, g.data());
    return std::vector<float>{g[kernel], g[kernel + 1], g[bias]};
  };
  CHECK(clipped(clipping(0, 6.5f)) == std::vector<float>{1.5f, 2.0f, 6.0f});
  CHECK(clipped(clipping(6.0f, 0)) == std::vector<float>{3, 4, 6});  // the kernel's 5 stays, the bias' 12 becomes 6
  CHECK(clipped(clipping(0, 100.0f)) == std::vector<float>{3, 4, 12});  // under the limit: untouched
}

namespace {

JobSpec clipped_job(const std::string& clip) {
  return parse_job_spec(R"({"dataset": {"name": "mnist10k"},
    "model": {"input_shape": [784], "seed": 3, "layers": [{"type": "dense", "units": 10}]},
    "optimizer": {"type": "sgd", "learning_rate": 0.5, )" + clip + R"(},
    "training": {"mode": "sync", "global_batch_size": 8, "workers": 2}})");
}

PushRequest push(uint32_t key, uint32_t slice, uint32_t examples, const std::vector<float>& grad) {
  PushRequest r;
  r.key = key;
  r.step = 0;
  r.slice = slice;
  r.slice_count = 2;
  r.worker = slice;
  r.examples = examples;
  r.base_version = 0;
  r.gradient = grad;
  return r;
}

}  // namespace

TEST_CASE("clipping - a shard holds the summed step, answers with its sum of squares, and applies it on a pull with the factor") {
  const JobSpec spec = clipped_job(R"("global_clipnorm": 1.0)");
  const std::vector<ChunkInfo> table = plan_chunks(make_param_layout(spec.model), 1, 1000);
  ParameterShard shard(shard_config_of(spec), table, 0, 2);
  const uint32_t key = 0;
  const size_t n = shard.chunk(key).size();
  const std::vector<float> w0(shard.chunk(key).values.begin(), shard.chunk(key).values.end());
  std::vector<float> g0(n, 3.0f), g1(n, 1.0f);
  std::optional<PushOutcome> r0, r1, late;
  shard.push(push(key, 0, 6, g0), [&](PushOutcome o) { r0 = o; });
  CHECK_FALSE(r0.has_value());
  shard.push(push(key, 1, 2, g1), [&](PushOutcome o) { r1 = o; });
  REQUIRE(r0.has_value());
  REQUIRE(r1.has_value());
  // Summed (3 + 1) / 8 = 0.5 per element, held: version 0, values unchanged.
  CHECK(r0->held);
  CHECK(r1->held);
  CHECK(r0->version == 0);
  CHECK(r0->sum_squares == 0.25 * static_cast<double>(n));
  CHECK(r1->sum_squares == r0->sum_squares);
  CHECK(shard.chunk(key).version == 0);
  CHECK(std::vector<float>(shard.chunk(key).values.begin(), shard.chunk(key).values.end()) == w0);
  // A slice pushed again (a takeover) is late, with the same sum.
  shard.push(push(key, 1, 2, g1), [&](PushOutcome o) { late = o; });
  REQUIRE(late.has_value());
  CHECK(late->held);
  CHECK_FALSE(late->applied);
  CHECK(late->sum_squares == r0->sum_squares);
  // A pull without a factor waits; one with applies the step with it and both complete.
  std::optional<uint64_t> plain, with_factor;
  shard.pull(key, 1, [&](uint64_t v) { plain = v; });
  CHECK_FALSE(plain.has_value());
  const float factor = 0.25f;
  shard.pull(key, 1, [&](uint64_t v) { with_factor = v; }, factor);
  REQUIRE(with_factor.has_value());
  REQUIRE(plain.has_value());
  CHECK(*plain == 1);
  CHECK(shard.chunk(key).version == 1);
  // w -= lr * 0.5 * factor, exactly as the float arithmetic does it.
  for (size_t i = 0; i < n; i += 97) CHECK(shard.chunk(key).values[i] == w0[i] - 0.5f * (0.5f * factor));
  // A second worker's pull with the factor finds the step applied: nothing changes.
  std::optional<uint64_t> again;
  shard.pull(key, 1, [&](uint64_t v) { again = v; }, factor);
  CHECK(again == 1u);
  CHECK(shard.chunk(key).values[0] == w0[0] - 0.5f * (0.5f * factor));
}

TEST_CASE("clipping - spec checks name the field: both kinds, async, backup workers, compression, sparse tables") {
  const auto error_of = [](const std::string& optimizer, const std::string& training,
                           const std::string& layer = R"({"type": "dense", "units": 10})") {
    try {
      parse_job_spec(R"({"dataset": {"name": "mnist10k"}, "model": {"input_shape": [784], "layers": [)" + layer +
                     R"(]}, "optimizer": {"type": "sgd", )" + optimizer + R"(}, "training": )" + training + "}");
    } catch (const SpecError& e) {
      return e.path() + ": " + e.detail();
    }
    return std::string("accepted");
  };
  const std::string sync = R"({"mode": "sync", "global_batch_size": 8, "workers": 2})";
  CHECK(error_of(R"("clipnorm": 1.0)", sync) == "accepted");
  CHECK(error_of(R"("clipnorm": 1.0, "global_clipnorm": 1.0)", sync).starts_with("/optimizer/global_clipnorm"));
  CHECK(error_of(R"("clipnorm": 0)", sync).starts_with("/optimizer/clipnorm"));
  CHECK(error_of(R"("global_clipnorm": -1)", sync).starts_with("/optimizer/global_clipnorm"));
  CHECK(error_of(R"("global_clipnorm": 1)", R"({"mode": "async", "global_batch_size": 8, "workers": 2})")
            .starts_with("/optimizer/global_clipnorm"));
  CHECK(error_of(R"("clipnorm": 1)", R"({"mode": "sync", "global_batch_size": 8, "workers": 2, "backup_workers": 1})")
            .starts_with("/optimizer/clipnorm"));
  CHECK(error_of(R"("clipnorm": 1)", R"({"mode": "sync", "global_batch_size": 8, "workers": 2, "compression": "fp16"})")
            .starts_with("/optimizer/clipnorm"));
  CHECK(error_of(R"("clipnorm": 1)", sync,
                 R"({"type": "embedding", "input_dim": 100, "output_dim": 4, "sparse": true}, {"type": "flatten"}, {"type": "dense", "units": 10})")
            .starts_with("/optimizer/clipnorm"));
  // The canonical JSON keeps the field.
  const JobSpec spec = clipped_job(R"("global_clipnorm": 2.5)");
  CHECK(job_spec_to_json(spec).find("\"global_clipnorm\":2.5") != std::string::npos);
  CHECK(parse_job_spec(job_spec_to_json(spec)).optimizer.global_clipnorm == 2.5f);
}

TEST_CASE("clipping - a late push of the step just applied gets its sum, a hold keeps the factor for later, a settle drops the held step") {
  const JobSpec spec = clipped_job(R"("clipnorm": 1.0)");
  const std::vector<ChunkInfo> table = plan_chunks(make_param_layout(spec.model), 1, 1000);
  const uint32_t key = 0;
  const auto held_shard = [&](ParameterShard& shard, double* sum) {
    const size_t n = shard.chunk(key).size();
    std::vector<float> g0(n, 3.0f), g1(n, 1.0f);
    std::optional<PushOutcome> r;
    shard.push(push(key, 0, 6, g0), [](PushOutcome) {});
    shard.push(push(key, 1, 2, g1), [&](PushOutcome o) { r = o; });
    REQUIRE(r.has_value());
    REQUIRE(r->held);
    if (sum != nullptr) *sum = r->sum_squares;
  };
  {  // Under a cut's hold at the held step's version the factor waits; lifting the hold applies it.
    ParameterShard shard(shard_config_of(spec), table, 0, 2);
    double sum = 0;
    held_shard(shard, &sum);
    shard.holds().hold_from(0);
    std::optional<uint64_t> pulled;
    shard.pull(key, 1, [&](uint64_t v) { pulled = v; }, 0.5f);
    CHECK_FALSE(pulled.has_value());
    CHECK(shard.chunk(key).version == 0);
    shard.release_hold();
    REQUIRE(pulled.has_value());
    CHECK(*pulled == 1);
    // Slice 0 pushing step 0 again (late): not applied, but told the step's sum like the others.
    const std::vector<float> g(shard.chunk(key).size(), 3.0f);
    std::optional<PushOutcome> late;
    shard.push(push(key, 0, 6, g), [&](PushOutcome o) { late = o; });
    REQUIRE(late.has_value());
    CHECK(late->held);
    CHECK_FALSE(late->applied);
    CHECK(late->sum_squares == sum);
  }
  {  // A settle (a re-plan) drops the held step with the pushes waiting beyond it.
    ParameterShard shard(shard_config_of(spec), table, 0, 2);
    held_shard(shard, nullptr);
    shard.holds().settle_from(0);
    shard.abort_waiting_and_release_hold(0);
    CHECK(shard.chunk(key).held_examples == -1);
    std::optional<uint64_t> pulled;
    shard.pull(key, 1, [&](uint64_t v) { pulled = v; }, 0.5f);
    CHECK_FALSE(pulled.has_value());  // the new plan's pushes make the step again
    CHECK(shard.chunk(key).version == 0);
  }
}
