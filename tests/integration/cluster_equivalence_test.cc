// Sync clusters against the standalone trainer: real coordinator, server and worker processes on
// loopback, 2 servers and 2 workers, whose parameters after a number of steps must equal the
// trainer's with as many batch slices (bit for bit where the test says so): the exactness
// contract of docs/DESIGN-NOTES.md, for SGD and Adam, every exchange, clipping, a CNN, mixed
// precision, and a dense layer whose kernel gradient the trainer's threads multiply together.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <regex>
#include <set>
#include <span>

#include "common/data/job_spec.h"
#include "common/engine/chunk_plan.h"
#include "common/engine/model_spec.h"
#include "common/engine/nn/data_parallel_model.h"
#include "common/engine/nn/onednn_conv.h"
#include "tests/integration/cluster.h"
#include "tests/test_support.h"
#include "worker/local_trainer.h"

using namespace pstrain;
using namespace std::chrono_literals;
using testing::mlp_cluster_spec;

namespace {

// The largest |a[i] - b[i]| (a and b of one size).
double max_abs_difference(std::span<const float> a, std::span<const float> b) {
  REQUIRE(a.size() == b.size());
  double largest = 0;
  for (size_t i = 0; i < a.size(); ++i) largest = std::max(largest, static_cast<double>(std::abs(a[i] - b[i])));
  return largest;
}

// Runs `json` on a cluster of 2 servers and 2 workers and in the standalone trainer with
// `replicas` batch slices; returns the largest parameter difference.
// `check_workers` (when given) is called with each worker's log.
double distributed_vs_standalone(const std::string& json, int replicas, int64_t expected_steps,
                                 std::vector<std::string> worker_flags = {},
                                 const std::function<void(const std::string&)>& check_workers = {}) {
  testing::TempDir dir;
  testing::Cluster cluster({.job_file = testing::write_spec(dir.path(), "job.json", json),
                            .save_params = dir.file("cluster.bin"),
                            .worker_flags = std::move(worker_flags)});
  REQUIRE(cluster.wait_job(120s) == 0);
  if (check_workers) {
    for (testing::Process* w : cluster.workers()) check_workers(w->log_text());
  }
  const std::vector<float> distributed = testing::read_floats(dir.file("cluster.bin"));

  LocalTrainerOptions options;
  options.data_dir = testing::data_dir();
  options.replicas = replicas;
  options.servers = 2;  // the cluster's first layer is summed per server's rows
  const TrainingResult local = train_locally(parse_job_spec(json), options);
  REQUIRE(local.steps == expected_steps);
  REQUIRE(distributed.size() == local.params.size());
  return max_abs_difference(distributed, local.params);
}

}  // namespace

TEST_CASE("sync SGD on 2 workers equals the trainer's two slices, and one step on the whole global batch") {
  // SGD makes loss scaling visible (Adam would hide a wrong factor: it is scale-invariant).
  // 5002 examples in global batches of 256: one epoch is 20 steps.
  JobSpec spec = parse_job_spec(mlp_cluster_spec(TrainingMode::kSync, 256, 1, 2, 2));
  spec.optimizer = OptimizerSpec{};
  spec.optimizer.type = OptimizerType::kSgd;
  spec.optimizer.learning_rate = 0.1f;
  spec.model.layers[1].l2 = 0.001f;  // and the L2 term, added once per step, not once per worker
  const double diff = distributed_vs_standalone(job_spec_to_json(spec), 2, 20);
  MESSAGE("max abs difference from the trainer's two slices " << diff);
  CHECK(diff == 0);
  // One worker with the whole batch sums its gradient in another order: the same step to
  // rounding. (Not over many steps: a pre-activation that rounding puts on the other side of a
  // ReLU's zero changes one example's gradient terms, and training then drifts apart by about
  // lr x such a term, 1e-5 to 1e-4 here after 20 steps, on one CPU level or another.)
  LocalTrainerOptions options;
  options.data_dir = testing::data_dir();
  options.max_steps = 1;
  options.replicas = 1;
  const TrainingResult whole = train_locally(spec, options);
  options.replicas = 2;
  const TrainingResult halves = train_locally(spec, options);
  const double step_diff = max_abs_difference(whole.params, halves.params);
  MESSAGE("one step, whole batch against two halves: max abs difference " << step_diff);
  CHECK(step_diff <= 1e-7);
}

TEST_CASE("sync Adam MLP on 2 servers and 2 workers equals the standalone trainer after 20 steps") {
  // The standalone trainer computes the step's gradient as two slices summed in order, like the
  // two workers. Adam divides by sqrt(v): where a gradient is ~0 its sign is round-off, and a
  // different summation order would move such weights by up to lr per step.
  const double diff = distributed_vs_standalone(mlp_cluster_spec(TrainingMode::kSync, 256, 1, 2, 2), 2, 20);
  MESSAGE("max abs difference " << diff);
  CHECK(diff <= 1e-4);
}

TEST_CASE("sync Adam MLP with factored pushes (64 examples per worker) equals the standalone trainer") {
  // With 64 examples per worker both large kernels travel as factors (worker/factor_plan.h) and
  // the servers multiply them out; with 128 (above) they do not. With "forward" the servers also
  // compute the first layer's product for each worker's next batch. 5002 examples in batches of
  // 128: 40 steps. Every exchange must give the trainer's parameters.
  for (const char* exchange : {"forward", "factored", "sparse", "dense"}) {
    CAPTURE(exchange);
    const double diff = distributed_vs_standalone(
        mlp_cluster_spec(TrainingMode::kSync, 128, 1, 2, 2), 2, 40, {std::string("--exchange=") + exchange},
        [&](const std::string& log) {
          const std::string e = exchange;
          CHECK((log.find("factored kernel pushes") != std::string::npos) == (e == "factored" || e == "forward"));
          CHECK((log.find("forward on the servers") != std::string::npos) == (e == "forward"));
          if (e == "forward") {
            // Most steps really forwarded (not the last of each epoch, nor any whose next batch
            // was not prefetched yet).
            std::smatch m;
            REQUIRE(std::regex_search(log, m, std::regex("finished [0-9]+ steps \\(([0-9]+) in this session")));
            CHECK(std::stoi(m[1]) >= 20);
          }
        });
    MESSAGE(std::string(exchange) << ": max abs difference " << diff);
    CHECK(diff <= 1e-4);
  }
}

TEST_CASE("sync with global_clipnorm or clipnorm on 2 servers and 2 workers equals the standalone trainer bit for bit, and clipping changes the steps") {
  // The MLP's kernels are striped over both servers, so the norms add chunks of both; every step's
  // gradient norm is above these limits (the unclipped run ends elsewhere).
  JobSpec spec = parse_job_spec(mlp_cluster_spec(TrainingMode::kSync, 256, 1, 2, 2));
  const std::vector<ChunkInfo> chunks = plan_chunks(make_param_layout(spec.model), 2);
  std::set<uint32_t> servers_of_first_kernel;
  for (const ChunkInfo& c : chunks) {
    if (c.param == 0) servers_of_first_kernel.insert(c.server);
  }
  CHECK(servers_of_first_kernel.size() == 2);
  for (const bool global : {true, false}) {
    CAPTURE(global);
    spec.optimizer = OptimizerSpec{};
    spec.optimizer.type = global ? OptimizerType::kSgd : OptimizerType::kAdam;
    spec.optimizer.learning_rate = global ? 0.1f : 0.001f;
    (global ? spec.optimizer.global_clipnorm : spec.optimizer.clipnorm) = 0.05f;
    const double diff = distributed_vs_standalone(job_spec_to_json(spec), 2, 20);
    MESSAGE(std::string(global ? "global_clipnorm" : "clipnorm") << ": max abs difference from the standalone trainer " << diff);
    CHECK(diff == 0);
    LocalTrainerOptions options;
    options.data_dir = testing::data_dir();
    options.replicas = 2;
    options.servers = 2;
    const TrainingResult clipped = train_locally(spec, options);
    spec.optimizer.clipnorm = spec.optimizer.global_clipnorm = 0.0f;
    const TrainingResult unclipped = train_locally(spec, options);
    const double moved = max_abs_difference(clipped.params, unclipped.params);
    MESSAGE("clipped against unclipped: max abs difference " << moved);
    CHECK(moved > 1e-3);
  }
}

TEST_CASE("sync CNN on 2 servers and 2 workers equals the standalone trainer after 20 steps") {
  // The Fashion-MNIST tutorial's CNN (conv, pool, conv, pool, dense, dense): conv kernels are
  // chunked and placed like dense ones. On mnist10k (same image shape) one epoch of batch 256 is
  // 20 steps.
  JobSpec spec = testing::fashion_cnn_job(1);
  spec.dataset.name = "mnist10k";
  spec.training.global_batch_size = 256;
  spec.training.servers = 2;
  spec.training.workers = 2;
  const double diff = distributed_vs_standalone(job_spec_to_json(spec), 2, 20);
  MESSAGE("max abs difference " << diff);
  CHECK(diff <= 1e-4);
}

TEST_CASE("sync SGD on a wide dense layer: 2 workers equal the trainer whose threads multiply the kernel gradient together") {
  // The Keras multi-worker tutorial's CNN: its 21,632 x 128 kernel is past the size from which the
  // trainer's two replicas leave its gradient as factors and both threads multiply them out by
  // blocks (simd/segmented_product.h); the bits must be the two workers' pushes summed.
  JobSpec spec = testing::fashion_cnn_job(1);
  spec.dataset.name = "mnist10k";
  spec.model = parse_model_spec(R"({"input_shape": [28, 28, 1], "seed": 1, "layers": [
      {"type": "conv2d", "filters": 32, "kernel_size": 3, "activation": "relu"}, {"type": "flatten"},
      {"type": "dense", "units": 128, "activation": "relu"}, {"type": "dense", "units": 10}]})");
  REQUIRE(nn::DataParallelModel<float>(spec.model, 128, 2).kernels_together() == 1);
  spec.optimizer = OptimizerSpec{};
  spec.optimizer.type = OptimizerType::kSgd;
  spec.optimizer.learning_rate = 0.05f;
  spec.training.global_batch_size = 256;
  spec.training.servers = 2;
  spec.training.workers = 2;
  const double diff = distributed_vs_standalone(job_spec_to_json(spec), 2, 20);
  MESSAGE("max abs difference " << diff);
  CHECK(diff == 0);
}

TEST_CASE("sync CNN in mixed_bfloat16 on 2 servers and 2 workers equals the standalone trainer bit for bit, and bfloat16 changes the steps") {
  // Its second convolution's products in bfloat16 where the CPU has them (else float32, said in the
  // log: a capped level's run of this test), the same in every process; the first, on one input
  // channel, float32 (the one-channel method).
  JobSpec spec = testing::fashion_cnn_job(1);
  spec.dataset.name = "mnist10k";
  spec.training.global_batch_size = 256;
  spec.training.servers = 2;
  spec.training.workers = 2;
  spec.precision = Precision::kMixedBfloat16;
  CHECK(job_spec_to_json(spec).find(R"("precision":"mixed_bfloat16")") != std::string::npos);
  const bool bf16 = nn::onednn_bf16();
  const double diff = distributed_vs_standalone(job_spec_to_json(spec), 2, 20, {}, [&](const std::string& log) {
    CHECK(log.find(bf16 ? "1 convolution(s) and 2 dense layer(s) compute their products in bfloat16" : "training in float32") != std::string::npos);
    if (bf16) CHECK(log.find("; 1 one-channel convolution(s), weights") != std::string::npos);
  });
  MESSAGE("max abs difference " << diff << std::string(bf16 ? " (bfloat16 convolutions and dense layers)" : " (no bfloat16 here: float32)"));
  CHECK(diff == 0);
  if (bf16) {
    LocalTrainerOptions options;
    options.data_dir = testing::data_dir();
    options.replicas = 2;
    options.max_steps = 5;
    const TrainingResult mixed = train_locally(spec, options);
    spec.precision = Precision::kFloat32;
    const TrainingResult full = train_locally(spec, options);
    const double apart = max_abs_difference(mixed.params, full.params);
    MESSAGE("bfloat16 against float32 after 5 steps: " << apart);
    CHECK(apart > 0);
    CHECK(apart < 1e-2);
  }
}
