// reduce_on_plateau end to end on a real cluster over HTTP: each epoch's learning rate follows the
// recorded epochs as Keras' rule says (common/data/reduce_on_plateau.h); 2 workers on 2 servers
// end with the standalone trainer's parameters bit for bit, also when a worker is killed
// mid-run, and the rule changes the result (the same job without it ends elsewhere).
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "common/data/job_spec.h"
#include "common/engine/safetensors.h"
#include "tests/integration/cluster.h"
#include "tests/integration/http_test_client.h"
#include "tests/test_support.h"
#include "worker/local_trainer.h"

using namespace pstrain;
using namespace pstrain::testing::http_test;
using namespace std::chrono_literals;

namespace {

// An MLP on mnist10k, sync, 2 workers on 2 servers, SGD, a backup every epoch; min_delta 10 in
// test loss: only epoch 1 improves, so with patience 0 the rate halves after every later epoch.
std::string plateau_mlp(bool plateau) {
  return std::string(R"({"name": "plateau", "dataset": {"name": "mnist10k", "shuffle_seed": 3},
    "model": {"input_shape": [28, 28, 1], "seed": 11, "layers": [{"type": "flatten"},
      {"type": "dense", "units": 24, "activation": "relu"}, {"type": "dense", "units": 10}]},
    "optimizer": {"type": "sgd", "learning_rate": 0.1, "momentum": 0.9},
    "training": {"mode": "sync", "global_batch_size": 200, "epochs": 4, "workers": 2, "servers": 2},
    "backup": {"save_freq": "epoch"})") +
         (plateau ? R"(, "reduce_on_plateau": {"monitor": "test_loss", "min_delta": 10, "patience": 0, "factor": 0.5}})"
                  : "}");
}

TrainingResult standalone(const std::string& spec) {
  LocalTrainerOptions options;
  options.data_dir = testing::data_dir();
  options.replicas = 2;
  options.servers = 2;
  return train_locally(parse_job_spec(spec), options);
}

double max_difference(const std::vector<float>& a, const AlignedFloats& b) {
  REQUIRE(a.size() == b.size());
  double d = 0;
  for (size_t i = 0; i < a.size(); ++i) d = std::max(d, static_cast<double>(std::abs(a[i] - b[i])));
  return d;
}

std::vector<float> model_of(testing::Cluster& cluster, const std::string& id, const std::string& spec) {
  const Reply model = get(cluster.http_port(), "/v1/jobs/" + id + "/model");
  REQUIRE(model.status == 200);
  return decode_model_state(make_param_layout(parse_job_spec(spec).model), model.body).params;
}

}  // namespace

TEST_CASE("reduce_on_plateau: the rate halves after epochs 2 and 3, and 2x2 sync equals the standalone trainer bit for bit, also with a worker killed") {
  const std::string spec = plateau_mlp(true);
  const TrainingResult local = standalone(spec);
  REQUIRE(local.epochs.size() == 4);
  CHECK(local.epochs[0].lr_scale == 1.0f);
  CHECK(local.epochs[1].lr_scale == 1.0f);
  CHECK(local.epochs[2].lr_scale == 0.5f);
  CHECK(local.epochs[3].lr_scale == 0.25f);
  const TrainingResult constant = standalone(plateau_mlp(false));
  const double moved = max_difference(std::vector<float>(constant.params.begin(), constant.params.end()), local.params);
  MESSAGE("with the rule against without: max abs difference " << moved);
  CHECK(moved > 1e-3);

  testing::Cluster cluster({.coordinator_flags = {"--dead-after-ms", "1500"}});
  const std::string calm = submit(cluster, spec);
  wait_for_state(cluster, calm, "SUCCEEDED", 240s);
  CHECK(max_difference(model_of(cluster, calm, spec), local.params) == 0);
  const std::string log = cluster.coordinator().log_text();
  CHECK(log.find("reduce_on_plateau: epoch 3 trains with learning rate 0.05") != std::string::npos);
  CHECK(log.find("reduce_on_plateau: epoch 4 trains with learning rate 0.025") != std::string::npos);
  bool worker_said = false;
  for (testing::Process* w : cluster.workers()) {
    worker_said = worker_said || w->log_text().find("epoch 4 trains with the learning rate times 0.25") != std::string::npos;
  }
  CHECK(worker_said);

  // A worker killed after the first epoch's backup: the survivor takes over or the job rolls
  // back; either way the same epochs' rates and the same parameters.
  const std::string id = submit(cluster, spec);
  const int64_t per_epoch = local.steps / 4;
  cluster.coordinator().wait_for_line("backup at step " + std::to_string(per_epoch) + " complete", 60s);
  cluster.workers()[1]->kill_hard();
  wait_for_state(cluster, id, "SUCCEEDED", 240s);
  const std::string after = cluster.coordinator().log_text();
  const bool lost = after.find("takes over worker") != std::string::npos || after.find("RECOVERING") != std::string::npos;
  CHECK_MESSAGE(lost, "the worker was not lost before the job ended");
  CHECK(max_difference(model_of(cluster, id, spec), local.params) == 0);
}
