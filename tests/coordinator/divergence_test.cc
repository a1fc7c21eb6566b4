// The divergence guard (coordinator/job/divergence_guard.h) on a cluster of threads
// (inprocess_cluster.h): a learning rate that blows the small MLP up to chance accuracy, with
// training.on_divergence "warn" (the job succeeds, with warnings carrying the figures) and "fail"
// (the job fails, saying why); a loss that becomes NaN fails the job either way; a healthy job
// gets no warning. The pure rules are checked without a cluster first.
#include <doctest/doctest.h>

#include <algorithm>
#include <string>

#include "common/data/job_spec.h"
#include "coordinator/job/divergence_guard.h"
#include "tests/coordinator/inprocess_cluster.h"
#include "tests/test_support.h"

using namespace pstrain;
using namespace std::chrono_literals;

namespace {

constexpr auto kJobTimeout = 90s;

// The small MLP (2 epochs of 40 steps) with plain SGD at `learning_rate`.
JobSpec sgd_job(float learning_rate, OnDivergence on_divergence) {
  JobSpec spec = testing::mlp_job(64, 32, 2);
  spec.optimizer = OptimizerSpec{};
  spec.optimizer.type = OptimizerType::kSgd;
  spec.optimizer.learning_rate = learning_rate;
  spec.training.servers = 1;
  spec.training.workers = 2;
  spec.training.on_divergence = on_divergence;
  return parse_job_spec(job_spec_to_json(spec));  // as submitted: canonical and checked
}

const JobWarning* find_warning(const JobRecord& r, const std::string& reason) {
  const auto it = std::find_if(r.warnings.begin(), r.warnings.end(), [&](const JobWarning& w) { return w.reason == reason; });
  return it == r.warnings.end() ? nullptr : &*it;
}

std::string warnings_of(const JobRecord& r) {
  std::string text;
  for (const auto& w : r.warnings) text += "\n  " + w.reason + ": " + w.detail;
  return text;
}

}  // namespace

TEST_CASE("divergence guard - the rules, on figures") {
  CHECK(chance_accuracy_threshold(10) == doctest::Approx(0.15));
  CHECK(chance_accuracy_threshold(2) == doctest::Approx(0.55));
  CHECK(chance_accuracy_threshold(100) == doctest::Approx(0.015));
  DivergenceGuard guard(10);
  guard.train_window(0, 2.3);  // the starting loss
  guard.train_window(0, 1.0);
  CHECK(guard.epoch_recorded(0, 0.8).empty());
  // Epoch 2: every window above 2.3, and the test accuracy at chance.
  guard.train_window(1, 2.5);
  guard.train_window(1, 9.0);
  auto found = guard.epoch_recorded(1, 0.1);
  REQUIRE(found.size() == 2);
  CHECK(found[0].reason == DivergenceReason::kLossAboveStart);
  CHECK(found[0].epoch == 2);
  CHECK(found[0].value == doctest::Approx(2.5));
  CHECK(found[0].threshold == doctest::Approx(2.3));
  CHECK(found[0].detail.find("2.3") != std::string::npos);
  CHECK(found[1].reason == DivergenceReason::kChanceAccuracy);
  CHECK(found[1].value == doctest::Approx(0.1));
  // One window below the start is enough to clear the loss rule; nothing evaluated, no accuracy rule.
  guard.train_window(2, 9.0);
  guard.train_window(2, 2.2);
  CHECK(guard.epoch_recorded(2, std::nullopt).empty());
  // A rollback forgets the redone epochs' windows (not the start).
  guard.restart_epochs_from(1);
  guard.train_window(1, 1.5);
  CHECK(guard.epoch_recorded(1, 0.16).empty());
  CHECK(guard.starting_loss() == doctest::Approx(2.3));
}

TEST_CASE("divergence guard - warn: a learning rate that blows up ends SUCCEEDED with warnings and figures") {
  testing::InProcessCluster cluster;
  const std::string id = cluster.submit(sgd_job(5.0f, OnDivergence::kWarn));
  const JobRecord r = cluster.wait_finished(id, kJobTimeout);
  INFO(cluster.describe(id) << warnings_of(r));
  REQUIRE(r.state == JobState::kSucceeded);
  const JobWarning* chance = find_warning(r, "chance_accuracy");
  REQUIRE(chance != nullptr);
  CHECK(chance->epoch == 1);
  CHECK(chance->value <= 0.15);
  CHECK(chance->threshold == doctest::Approx(0.15));
  CHECK(chance->detail.find("at chance level") != std::string::npos);
  CHECK(find_warning(r, "loss_not_finite") == nullptr);
  CHECK(cluster.printed().find("divergence warning (chance_accuracy)") != std::string::npos);

  // The same job at a sane rate gets no warning.
  const std::string healthy = cluster.submit(sgd_job(0.1f, OnDivergence::kFail));
  const JobRecord h = cluster.wait_finished(healthy, kJobTimeout);
  INFO(cluster.describe(healthy) << warnings_of(h));
  CHECK(h.state == JobState::kSucceeded);
  CHECK(h.warnings.empty());
}

TEST_CASE("divergence guard - fail: the job ends FAILED after the epoch, with the figures") {
  testing::InProcessCluster cluster;
  const std::string id = cluster.submit(sgd_job(5.0f, OnDivergence::kFail));
  const JobRecord r = cluster.wait_finished(id, kJobTimeout);
  INFO(cluster.describe(id) << warnings_of(r));
  REQUIRE(r.state == JobState::kFailed);
  CHECK(r.reason.find("diverged: epoch 1: test accuracy") != std::string::npos);
  CHECK(r.reason.find("at chance level") != std::string::npos);
  REQUIRE(find_warning(r, "chance_accuracy") != nullptr);
  CHECK(find_warning(r, "chance_accuracy")->epoch == 1);
  CHECK(r.steps_done < r.total_steps);  // stopped after epoch 1, not at the end
  CHECK(!r.has_model);
}

TEST_CASE("divergence guard - a loss that becomes NaN fails the job even with warn, with a warning") {
  testing::InProcessCluster cluster;
  const std::string id = cluster.submit(sgd_job(1000.0f, OnDivergence::kWarn));
  const JobRecord r = cluster.wait_finished(id, kJobTimeout);
  INFO(cluster.describe(id) << warnings_of(r));
  REQUIRE(r.state == JobState::kFailed);
  CHECK(r.reason.find("loss became") != std::string::npos);
  const JobWarning* nan = find_warning(r, "loss_not_finite");
  REQUIRE(nan != nullptr);
  CHECK(nan->epoch == 1);
  CHECK(nan->detail.find("loss became") != std::string::npos);
}
