// What the recovery tests (recovery_test.cc, tests/netbed/netbed_test.cc) compare a recovered run
// against: the reference job and the parameters of an uninterrupted run of it.
#pragma once

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "common/data/job_spec.h"
#include "tests/test_support.h"
#include "worker/local_trainer.h"

namespace pstrain::testing {

// The MLP in sync mode on 2 servers and 2 workers, backed up every `save_freq` steps.
inline std::string recovery_job_json(int64_t epochs, int64_t save_freq) {
  JobSpec spec = mlp_job(700, 500, static_cast<int>(epochs));
  spec.training.servers = 2;
  spec.training.workers = 2;
  spec.backup.frequency = BackupSpec::Frequency::kSteps;
  spec.backup.steps = save_freq;
  return job_spec_to_json(spec);
}

// What an uninterrupted run gives: the standalone trainer with the step cut into two slices and
// the first layer summed per server, which equals the 2-worker cluster bit for bit
// (cluster_test.cc checks that).
inline std::vector<float> uninterrupted_params(const std::string& json) {
  LocalTrainerOptions options;
  options.data_dir = data_dir();
  options.replicas = 2;
  options.servers = static_cast<uint32_t>(parse_job_spec(json).training.servers);
  const TrainingResult r = train_locally(parse_job_spec(json), options);
  return {r.params.begin(), r.params.end()};
}

inline double max_difference(const std::vector<float>& a, const std::vector<float>& b) {
  REQUIRE(a.size() == b.size());
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) worst = std::max(worst, static_cast<double>(std::abs(a[i] - b[i])));
  return worst;
}

}  // namespace pstrain::testing
