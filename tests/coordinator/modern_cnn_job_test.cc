// Issue 35's equivalence run: a small image model with everything that draws per example or
// normalizes per batch (random_flip and random_crop, a conv2d residual block with batch_norm,
// dropout, global average pooling) and a cosine schedule, trained sync on 1, 2 and 3 workers: each
// run equals the standalone trainer with as many slices, bit for bit (moving statistics included).
#include <doctest/doctest.h>

#include "common/data/dataset.h"
#include "common/data/job_spec.h"
#include "tests/coordinator/inprocess_cluster.h"
#include "tests/synthetic_data.h"
#include "worker/local_trainer.h"

using namespace pstrain;
using namespace std::chrono_literals;

namespace {

// "quadrants": 8x8x1 images in 4 classes (testing::quadrant_images), 150 train (a partial last
// batch), 60 test.
SplitLoader quadrants() {
  return [](const std::string& dataset, SplitKind kind) {
    Rng rng(kind == SplitKind::kTrain ? 3 : 4);
    const testing::Examples e = testing::quadrant_images(rng, kind == SplitKind::kTrain ? 150 : 60);
    return make_split(dataset, kind, testing::as_parsed(e, {8, 8, 1}, Dtype::kFloat32, 4));
  };
}

JobSpec modern_job(int workers) {
  const std::string text = R"({"name": "modern", "dataset": {"name": "quadrants"},
    "model": {"input_shape": [8, 8, 1], "seed": 6, "layers": [
      {"type": "random_flip"},
      {"type": "random_crop", "padding": 1},
      {"type": "conv2d", "name": "stem", "filters": 4, "kernel_size": 3, "padding": "same", "use_bias": false},
      {"type": "batch_norm", "momentum": 0.9},
      {"type": "activation", "activation": "relu", "name": "a"},
      {"type": "conv2d", "filters": 4, "kernel_size": 3, "padding": "same", "activation": "relu"},
      {"type": "conv2d", "filters": 4, "kernel_size": 3, "padding": "same", "name": "b"},
      {"type": "add", "inputs": ["a", "b"]},
      {"type": "global_avgpool2d"},
      {"type": "dropout", "rate": 0.2},
      {"type": "dense", "units": 4}]},
    "optimizer": {"type": "adam", "learning_rate": {"schedule": "cosine_decay", "initial_learning_rate": 0.0,
                  "warmup_steps": 3, "warmup_target": 0.01, "decay_steps": 10}},
    "training": {"mode": "sync", "global_batch_size": 24, "epochs": 2, "workers": WORKERS}})";
  std::string s = text;
  return parse_job_spec(s.replace(s.find("WORKERS"), 7, std::to_string(workers)));
}

}  // namespace

TEST_CASE("a residual CNN with batch_norm, dropout, augmentation and a cosine schedule: N workers equal N slices bit for bit") {
  for (int workers : {1, 2, 3}) {
    const JobSpec spec = modern_job(workers);
    CHECK(spec.model.layers[3].virtual_batch_size == 24 / workers);
    std::vector<float> distributed;
    {
      testing::InProcessCluster cluster({.servers = 2, .workers = workers, .load_split = quadrants()});
      const std::string id = cluster.submit(spec);
      const JobRecord r = cluster.wait_finished(id, 120s);
      REQUIRE_MESSAGE(r.state == JobState::kSucceeded, cluster.describe(id));
      distributed = cluster.final_params(id);
    }
    LocalTrainerOptions options;
    options.load_split = quadrants();
    options.replicas = workers;
    options.servers = 2;
    const TrainingResult local = train_locally(spec, options);
    REQUIRE(distributed.size() == local.params.size());
    size_t differ = 0;
    for (size_t k = 0; k < distributed.size(); ++k) differ += distributed[k] != local.params[k];
    MESSAGE(workers << " worker(s): " << differ << " of " << distributed.size() << " parameters differ");
    CHECK(differ == 0);
  }
}
