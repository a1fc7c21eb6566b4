// Text jobs under faults, over HTTP with a real cluster: a masked transformer encoder with an LSTM,
// trained with global_clipnorm (every step's norm is above it), on seeded reviews (documents read and tokenized by the workers, the tokenizer fitted by the coordinator)
// loses a worker (kill -9), its coordinator (kill -9, restarted) or a server (kill -9, restarted
// from its backup), and ends with the parameters of the uninterrupted run (the standalone trainer
// with as many slices) bit for bit, every example of every epoch used once (the data ledger).
#include <doctest/doctest.h>

#include <regex>
#include <string>
#include <vector>

#include "common/data/job_spec.h"
#include "common/engine/safetensors.h"
#include "tests/integration/cluster.h"
#include "tests/integration/http_test_client.h"
#include "tests/integration/recovery_support.h"
#include "tests/integration/text_fixtures.h"
#include "tests/test_support.h"
#include "worker/local_trainer.h"

using namespace pstrain;
using namespace pstrain::testing::http_test;
using namespace std::chrono_literals;

namespace {

// 400 training documents, 40 a step: 10 steps an epoch, 20 epochs, a backup every 10 steps.
std::string transformer_job(int workers) {
  return R"({"name": "reviews-faults", "dataset": {"name": "reviews", "shuffle_seed": 8},
    "preprocessing": {"text": {"max_tokens": 40, "output_mode": "int", "output_sequence_length": 16}},
    "model": {"input_shape": [16], "seed": 10, "layers": [
      {"name": "tokens", "type": "embedding", "input_dim": 40, "output_dim": 8, "mask_zero": true},
      {"name": "x", "type": "position_embedding"},
      {"name": "attend", "type": "multi_head_attention", "num_heads": 2, "key_dim": 4},
      {"type": "add", "inputs": ["x", "attend"]},
      {"type": "layer_norm"},
      {"type": "lstm", "units": 4, "return_sequences": true},
      {"type": "global_avgpool1d"},
      {"type": "dense", "units": 2}]},
    "optimizer": {"type": "adam", "learning_rate": 0.02, "global_clipnorm": 0.5},
    "training": {"mode": "sync", "global_batch_size": 40, "epochs": 20, "workers": )" + std::to_string(workers) + R"(, "servers": 2},
    "backup": {"save_freq": 10}})";
}

// Uploads the reviews, submits the job, runs `fault` once its first backups are in, and checks the
// model equals the standalone trainer's with as many slices as the job had workers, and (`ledger`)
// the data ledger's count of each epoch's examples (a restarted coordinator reports the epochs
// after its restart only).
// Returns the coordinator's log (before and after the fault).
template <typename Fault>
std::string run_with_fault(int workers, bool ledger, Fault fault) {
  testing::TempDir data;
  testing::ClusterOptions options;
  options.workers = workers;
  options.coordinator_flags = {"--data-dir", data.path(), "--dead-after-ms", "1500"};
  testing::Cluster cluster(options);
  const int port = cluster.http_port();
  REQUIRE(call(port, http::verb::put, "/v1/datasets/reviews/train", testing::archive_of(testing::seeded_reviews(200, 3), true),
               "application/zip").status == 201);
  REQUIRE(call(port, http::verb::put, "/v1/datasets/reviews/test", testing::archive_of(testing::seeded_reviews(40, 4), true),
               "application/zip").status == 201);
  const std::string spec = transformer_job(workers);
  LocalTrainerOptions local;
  local.data_dir = data.path();
  local.replicas = static_cast<uint32_t>(workers);
  local.servers = 2;  // the cluster's chunk plan, which clipping's norms are summed over
  const TrainingResult uninterrupted = train_locally(parse_job_spec(spec), local);
  JobSpec unclipped = parse_job_spec(spec);
  unclipped.optimizer.global_clipnorm = 0.0f;
  const TrainingResult other = train_locally(unclipped, local);
  CHECK(testing::max_difference(std::vector<float>(other.params.begin(), other.params.end()),
                                std::vector<float>(uninterrupted.params.begin(), uninterrupted.params.end())) > 1e-3);

  const std::string id = submit(cluster, spec);
  cluster.coordinator().wait_for_line("backup at step 20 complete", 120s);
  const std::string log_before = cluster.coordinator().log_text();  // (a restarted coordinator logs anew)
  fault(cluster);
  wait_for_state(cluster, id, "SUCCEEDED", 240s);
  const Reply model = get(cluster.http_port(), "/v1/jobs/" + id + "/model");
  REQUIRE(model.status == 200);
  const std::vector<float> params = decode_model_state(make_param_layout(parse_job_spec(spec).model), model.body).params;
  CHECK(testing::max_difference(params, std::vector<float>(uninterrupted.params.begin(), uninterrupted.params.end())) == 0);
  const std::string log = log_before + cluster.coordinator().log_text();
  for (int epoch = 1; ledger && epoch <= 20; ++epoch) {
    INFO("epoch " << epoch);
    CHECK(log.find("examples of epoch " + std::to_string(epoch) + ": 400 used once, 0 missing, 0 used more than once") !=
          std::string::npos);
  }
  return log;
}

}  // namespace

TEST_CASE("text jobs under faults - kill -9 of a worker: the job ends on the others with the uninterrupted parameters") {
  const std::string log = run_with_fault(3, true, [](testing::Cluster& cluster) { cluster.workers()[2]->kill_hard(); });
  CHECK(log.find("with 2 worker(s)") != std::string::npos);
}

TEST_CASE("text jobs under faults - kill -9 of the coordinator, restarted: the uninterrupted parameters") {
  const std::string log = run_with_fault(2, false, [](testing::Cluster& cluster) { cluster.restart_coordinator(/*hard=*/true); });
  CHECK(log.find("re-queued after a restart") != std::string::npos);
}

TEST_CASE("text jobs under faults - kill -9 of a server, restarted from its backup: the uninterrupted parameters") {
  const std::string log = run_with_fault(2, true, [](testing::Cluster& cluster) {
    cluster.stop_server(1, /*hard=*/true);
    cluster.start_server(1);
  });
  CHECK(std::regex_search(log, std::regex("step\\(s\\) to replay|rolled back|restor")));
}
