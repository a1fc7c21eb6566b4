// training.compression end to end on a cluster of threads (inprocess_cluster.h): a sync job on
// MNIST with each compression trains (test accuracy above a threshold a broken codec could not
// reach: values decoded as the wrong type, indices off by one, a residual never sent), two runs
// of the same job end with the same parameters bit for bit, and the bytes each worker reports
// per step are what the codec puts on the wire (half of float32 for fp16 both ways and for bf16's
// pushes; about 8 bytes per
// sent entry for topk; the factors' floats for powersgd).
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "common/data/job_spec.h"
#include "common/engine/nn/onednn_conv.h"
#include "tests/coordinator/inprocess_cluster.h"
#include "tests/test_support.h"

using namespace pstrain;
using namespace std::chrono_literals;

namespace {

// The small MLP, 2 epochs, 1 server and 2 workers, sync.
JobSpec compressed_job(CompressionKind kind, float fraction = 0.1f, uint32_t rank = 4) {
  JobSpec spec = testing::mlp_job(64, 32, 2);
  spec.training.servers = 1;
  spec.training.workers = 2;
  spec.training.compression.kind = kind;
  spec.training.compression.fraction = fraction;
  spec.training.compression.rank = rank;
  return parse_job_spec(job_spec_to_json(spec));  // as the coordinator receives it
}

constexpr size_t kParams = 784 * 64 + 64 + 64 * 32 + 32 + 32 * 10 + 10;

struct Run {
  JobRecord record;
  std::vector<float> params;
};

Run run(const JobSpec& spec) {
  testing::InProcessCluster cluster({.servers = 1, .workers = 2});
  const std::string id = cluster.submit(spec);
  const JobRecord r = cluster.wait_finished(id, 120s);
  REQUIRE_MESSAGE(r.state == JobState::kSucceeded, cluster.describe(id));
  return {r, cluster.final_params(id)};
}

// Runs the job twice; returns the first run.
Run check_trains_and_repeats(CompressionKind kind, double min_accuracy, float fraction = 0.1f, uint32_t rank = 4) {
  const JobSpec spec = compressed_job(kind, fraction, rank);
  const Run first = run(spec), second = run(spec);
  INFO("compression " << std::string(compression_kind_name(kind)));
  REQUIRE(first.record.test_accuracy.has_value());
  MESSAGE(std::string(compression_kind_name(kind)) << ": test accuracy " << *first.record.test_accuracy << ", bytes per step pushed "
                                      << first.record.bytes_pushed_per_step.at(0) << ", pulled "
                                      << first.record.bytes_pulled_per_step.at(0));
  CHECK(*first.record.test_accuracy > min_accuracy);
  REQUIRE(first.params.size() == kParams);
  CHECK_MESSAGE(first.params == second.params, "two runs of the same compressed sync job differ");
  REQUIRE(first.record.bytes_pushed_per_step.size() == 2);
  REQUIRE(first.record.bytes_pulled_per_step.size() == 2);
  return first;
}

}  // namespace

TEST_CASE("compression none: reports bytes per step per worker") {
  check_trains_and_repeats(CompressionKind::kNone, 0.85);
}

TEST_CASE("compression fp16: trains, is deterministic, and sends 2 bytes per value both ways") {
  const Run r = check_trains_and_repeats(CompressionKind::kFp16, 0.85);
  for (size_t w = 0; w < 2; ++w) {
    CHECK(r.record.bytes_pushed_per_step[w] == doctest::Approx(2.0 * kParams));
    CHECK(r.record.bytes_pulled_per_step[w] == doctest::Approx(2.0 * kParams));
  }
}

TEST_CASE("compression bf16: trains, is deterministic, and pushes 2 bytes per value (values come back float32)") {
  const Run r = check_trains_and_repeats(CompressionKind::kBf16, 0.85);
  for (size_t w = 0; w < 2; ++w) {
    CHECK(r.record.bytes_pushed_per_step[w] == doctest::Approx(2.0 * kParams));
    CHECK(r.record.bytes_pulled_per_step[w] == doctest::Approx(4.0 * kParams));
  }
}

TEST_CASE("mixed_bfloat16: the kernels only bfloat16 products read come back as 2 bytes a value, the rest as float32") {
  // bf16 pushes (the dense exchange), precision mixed_bfloat16: the hidden layers' kernels
  // (Model::rounded_kernels) come back in bfloat16; the first layer's (a data input, read in
  // float32 where its inputs are sparse) and the biases in float32. Deterministic as ever.
  JobSpec spec = compressed_job(CompressionKind::kBf16);
  spec.precision = Precision::kMixedBfloat16;
  spec = parse_job_spec(job_spec_to_json(spec));
  const Run first = run(spec), second = run(spec);
  REQUIRE(first.record.test_accuracy.has_value());
  MESSAGE("mixed_bfloat16, bf16 pushes: test accuracy " << *first.record.test_accuracy << ", bytes per step pushed "
                                                        << first.record.bytes_pushed_per_step.at(0) << ", pulled "
                                                        << first.record.bytes_pulled_per_step.at(0));
  CHECK(*first.record.test_accuracy > 0.85);
  CHECK_MESSAGE(first.params == second.params, "two runs of the same mixed-precision sync job differ");
  const double rounded = 64 * 32 + 32 * 10;
  const double pulled = nn::onednn_bf16() ? 4.0 * (kParams - rounded) + 2.0 * rounded : 4.0 * kParams;
  REQUIRE(first.record.bytes_pulled_per_step.size() == 2);
  for (size_t w = 0; w < 2; ++w) {
    CHECK(first.record.bytes_pushed_per_step[w] == doctest::Approx(2.0 * kParams));
    CHECK(first.record.bytes_pulled_per_step[w] == doctest::Approx(pulled));
  }
}

TEST_CASE("compression topk: trains with error feedback, is deterministic, and pushes about 8 bytes per sent entry") {
  const Run r = check_trains_and_repeats(CompressionKind::kTopk, 0.80, 0.1f);
  for (size_t w = 0; w < 2; ++w) {
    // ceil(0.1 * size) per chunk: at least a tenth, at most a tenth plus one per chunk (a few).
    CHECK(r.record.bytes_pushed_per_step[w] >= 8.0 * 0.1 * kParams);
    CHECK(r.record.bytes_pushed_per_step[w] <= 8.0 * (0.1 * kParams + 64));
    CHECK(r.record.bytes_pulled_per_step[w] == doctest::Approx(4.0 * kParams));  // values whole, float32
  }
}

TEST_CASE("compression powersgd: trains with error feedback, is deterministic, and pushes only the factors of each kernel chunk") {
  const Run r = check_trains_and_repeats(CompressionKind::kPowerSgd, 0.83, 0.1f, 4);
  // One server: the 784 x 64 kernel in 4 chunks of 196 whole rows, 64 x 32 and 32 x 10 whole; each
  // goes as (rows + columns) x 4 floats, the biases (64 + 32 + 10) dense.
  const double floats = 4 * (196 + 64) * 4 + (64 + 32) * 4 + (32 + 10) * 4 + (64 + 32 + 10);
  for (size_t w = 0; w < 2; ++w) {
    CHECK(r.record.bytes_pushed_per_step[w] == doctest::Approx(4.0 * floats));
    CHECK(r.record.bytes_pulled_per_step[w] == doctest::Approx(4.0 * kParams));  // values whole, float32
  }
}

TEST_CASE("compression in async mode: fp16, bf16, topk and powersgd jobs train (pushes applied at once, decoded per push)") {
  for (const CompressionKind kind :
       {CompressionKind::kFp16, CompressionKind::kBf16, CompressionKind::kTopk, CompressionKind::kPowerSgd}) {
    JobSpec spec = compressed_job(kind, 0.1f);
    spec.training.mode = TrainingMode::kAsync;
    const Run r = run(parse_job_spec(job_spec_to_json(spec)));
    INFO("compression " << std::string(compression_kind_name(kind)));
    REQUIRE(r.record.test_accuracy.has_value());
    CHECK(*r.record.test_accuracy > 0.8);
    CHECK(r.record.bytes_pushed_per_step.at(0) < 4.0 * kParams);
  }
}
