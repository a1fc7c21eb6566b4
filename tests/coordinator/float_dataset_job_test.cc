// A whole distributed job on a dataset the built-in table does not know: float32 features of
// another shape and class count, handed to the coordinator's DataService through its split loader
// (what a dataset catalog plugs into), on a cluster of threads (inprocess_cluster.h). A broken
// data path (bytes read as the wrong dtype, labels cut to a byte, misaligned examples) could not
// reach the accuracy checked, and the parameters must be the standalone trainer's.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>

#include "common/data/dataset.h"
#include "common/data/job_spec.h"
#include "tests/coordinator/inprocess_cluster.h"
#include "tests/synthetic_data.h"
#include "worker/local_trainer.h"

using namespace pstrain;
using namespace std::chrono_literals;

namespace {

// "separable-30": 30 float32 features in 3 linearly separable classes, 1200 training and 400
// test examples, the same at every call.
Split separable_split(const std::string& dataset, SplitKind kind) {
  Rng rng(7);
  std::vector<float> w(3 * 30);
  for (float& v : w) v = rng.uniform_float(-1.0f, 1.0f);
  const testing::Examples train = testing::separable_features(rng, w, 1200);
  const testing::Examples test = testing::separable_features(rng, w, 400);
  return make_split(dataset, kind, testing::as_parsed(kind == SplitKind::kTrain ? train : test, {30}, Dtype::kFloat32, 3));
}

JobSpec separable_job() {
  JobSpec spec;
  spec.name = "separable-30-mlp";
  spec.dataset.name = "separable-30";
  spec.dataset.shuffle_seed = 5;
  spec.model.input_shape = {30};
  spec.model.seed = 3;
  LayerSpec hidden, out;
  hidden.units = 32;
  hidden.activation = Activation::kReLU;
  out.units = 3;
  spec.model.layers = {hidden, out};
  spec.optimizer.learning_rate = 0.01f;
  spec.training.mode = TrainingMode::kSync;
  spec.training.global_batch_size = 64;
  spec.training.epochs = 5;
  spec.training.servers = 2;
  spec.training.workers = 2;
  return spec;
}

}  // namespace

TEST_CASE("a float32 dataset from the coordinator's split loader trains on 2 workers as the standalone trainer does") {
  const JobSpec spec = separable_job();
  testing::InProcessCluster cluster({.load_split = separable_split});
  const std::string id = cluster.submit(spec);
  const JobRecord r = cluster.wait_finished(id, 60s);
  REQUIRE_MESSAGE(r.state == JobState::kSucceeded, cluster.describe(id));
  REQUIRE(r.test_accuracy.has_value());
  MESSAGE("test accuracy " << *r.test_accuracy);
  CHECK(*r.test_accuracy >= 0.9);
  const std::vector<float> distributed = cluster.final_params(id);

  LocalTrainerOptions options;
  options.load_split = separable_split;
  options.replicas = 2;  // the two workers' slices, summed in order
  options.servers = 2;   // the cluster's first layer is summed per server's rows
  const TrainingResult local = train_locally(spec, options);
  CHECK(local.epochs.back().test_accuracy == *r.test_accuracy);
  REQUIRE(distributed.size() == local.params.size());
  double max_diff = 0;
  size_t differ = 0;
  for (size_t i = 0; i < distributed.size(); ++i) {
    if (distributed[i] != local.params[i]) ++differ;
    max_diff = std::max(max_diff, static_cast<double>(std::abs(distributed[i] - local.params[i])));
  }
  MESSAGE(differ << " of " << distributed.size() << " parameters differ from the standalone trainer's, max abs "
                 << max_diff);
  // A sync job computes what the trainer does, in the same order: bit for bit.
  CHECK(differ == 0);
}
