// A job submitted to a test cluster over REST and trained by the standalone trainer on the same
// spec: what the equivalence tests compare (the cluster's parameters against the trainer's, bit
// for bit) and what they check next (the job's final status, its model file).
// Thread rules: test helpers, one thread.
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include "common/data/job_spec.h"
#include "common/engine/safetensors.h"
#include "tests/integration/http_test_client.h"
#include "worker/local_trainer.h"

namespace pstrain::testing {

// A model file's parameters, read with the spec's layout.
inline std::vector<float> params_of(const std::string& spec_json, const std::string& file) {
  return decode_model_state(make_param_layout(parse_job_spec(spec_json).model), file).params;
}

struct StandaloneMatch {
  std::string id;
  boost::json::object done;               // the job's status once SUCCEEDED
  std::string model_file;                 // GET /v1/jobs/{id}/model
  std::vector<float> cluster, standalone;  // the two runs' parameters
};

// Trains `spec_json` standalone with `local`, then on `cluster` (waiting up to `timeout` for
// SUCCEEDED), and fetches the job's model file. Without `local.servers`, the standalone trainer
// groups a first dense layer's rows as the spec's servers do (the cluster's order of additions:
// local_trainer.h), without which the two agree only where a BLAS product happens to round the
// same way.
inline StandaloneMatch run_against_standalone(Cluster& cluster, const std::string& spec_json, LocalTrainerOptions local,
                                              std::chrono::seconds timeout = std::chrono::seconds(240)) {
  StandaloneMatch m;
  const JobSpec spec = parse_job_spec(spec_json);
  if (local.servers == 0) local.servers = static_cast<uint32_t>(spec.training.servers);
  const TrainingResult standalone = train_locally(spec, local);
  m.standalone.assign(standalone.params.begin(), standalone.params.end());
  m.id = http_test::submit(cluster, spec_json);
  m.done = http_test::wait_for_state(cluster, m.id, "SUCCEEDED", timeout);
  const http_test::Reply model = http_test::get(cluster.http_port(), "/v1/jobs/" + m.id + "/model");
  REQUIRE(model.status == 200);
  m.model_file = model.body;
  m.cluster = params_of(spec_json, m.model_file);
  return m;
}

}  // namespace pstrain::testing
