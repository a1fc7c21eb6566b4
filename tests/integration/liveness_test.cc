// Liveness with real processes (issue 33, DESIGN-NOTES "Liveness"): a step longer than the dead
// timeout, a stalled coordinator, and a node that stops advancing, none of which may end in a
// spurious recovery; and a real loss among long steps still recovers exactly.
#include <doctest/doctest.h>

#include <csignal>
#include <regex>
#include <thread>

#include "common/data/job_spec.h"
#include "tests/integration/cluster.h"
#include "tests/integration/recovery_support.h"
#include "tests/test_support.h"

using namespace pstrain;
using namespace std::chrono_literals;

namespace {

int count(const std::string& text, const std::string& pattern) {
  const std::regex re(pattern);
  return static_cast<int>(std::distance(std::sregex_iterator(text.begin(), text.end(), re), std::sregex_iterator()));
}

// The recovery job (the MLP, sync, 2 servers x 2 workers, backups every `save_freq` steps) on the
// first `examples` examples' worth of steps: `steps` steps of one epoch.
std::string short_job(int64_t steps, int64_t save_freq) {
  JobSpec spec = parse_job_spec(testing::recovery_job_json(1, save_freq));
  spec.training.global_batch_size = 5002 / steps + 1;  // mnist10k's 5,002 training examples
  return job_spec_to_json(spec);
}

}  // namespace

TEST_CASE("a worker whose steps take longer than --dead-after-ms is never declared dead, and nothing recovers") {
  // Each step keeps the workers' event loops busy for 4 s against a dead timeout of 1.5 s: their
  // heartbeats come from a thread of their own.
  testing::TempDir dir;
  const std::string json = short_job(3, 1000);
  testing::Cluster cluster({.job_file = testing::write_spec(dir.path(), "job.json", json),
                            .save_params = dir.file("final.bin"),
                            .coordinator_flags = {"--dead-after-ms", "1500", "--heartbeat-ms", "300"},
                            .worker_flags = {"--slow-step-ms", "4000"}});
  REQUIRE(cluster.wait_job(120s) == 0);
  const std::string log = cluster.coordinator().log_text();
  CHECK(count(log, "missed its heartbeats") == 0);
  CHECK(count(log, "RUNNING again") == 0);
  CHECK(count(log, "taken over") == 0);
  CHECK(testing::max_difference(testing::read_floats(dir.file("final.bin")), testing::uninterrupted_params(json)) == 0);
}

TEST_CASE("the coordinator stopped for 3x --dead-after-ms: no node declared dead, no recovery, the uninterrupted result") {
  testing::TempDir dir;
  const std::string json = testing::recovery_job_json(2, 20);
  testing::Cluster cluster({.job_file = testing::write_spec(dir.path(), "job.json", json),
                            .save_params = dir.file("final.bin"),
                            .coordinator_flags = {"--dead-after-ms", "1500", "--heartbeat-ms", "300"}});
  cluster.coordinator().wait_for_line("backup at step 20 complete", 60s);
  REQUIRE(cluster.coordinator().signal(SIGSTOP));
  std::this_thread::sleep_for(4500ms);
  REQUIRE(cluster.coordinator().signal(SIGCONT));
  REQUIRE(cluster.wait_job(180s) == 0);
  const std::string log = cluster.coordinator().log_text();
  MESSAGE(count(log, "connected again") << " registration(s) of the same process again");
  CHECK(count(log, "the coordinator was stalled for") >= 1);
  CHECK(count(log, "missed its heartbeats") == 0);
  CHECK(count(log, "RUNNING again") == 0);
  CHECK(testing::max_difference(testing::read_floats(dir.file("final.bin")), testing::uninterrupted_params(json)) == 0);
}

TEST_CASE("long steps and a server killed -9: the job recovers once and ends as the uninterrupted one") {
  // Steps of 2.5 s against a dead timeout of 1 s, backups every 2 steps; server 1 killed after
  // the backup at step 2 and started again.
  testing::TempDir dir;
  const std::string json = short_job(6, 2);
  testing::Cluster cluster({.job_file = testing::write_spec(dir.path(), "job.json", json),
                            .save_params = dir.file("final.bin"),
                            .coordinator_flags = {"--dead-after-ms", "1000", "--heartbeat-ms", "250"},
                            .worker_flags = {"--slow-step-ms", "2500"}});
  cluster.coordinator().wait_for_line("backup at step 2 complete", 60s);
  cluster.stop_server(1, /*hard=*/true);
  cluster.start_server(1);
  REQUIRE(cluster.wait_job(180s) == 0);
  const std::string log = cluster.coordinator().log_text();
  CHECK(count(log, "RUNNING again") == 1);  // the server's loss, and nothing else
  CHECK(count(log, "missed its heartbeats") <= 1);
  CHECK(testing::max_difference(testing::read_floats(dir.file("final.bin")), testing::uninterrupted_params(json)) == 0);
}
