// JobRunner's recovery paths (coordinator/job/) against a cluster of threads in this process
// (inprocess_cluster.h): the coordinator, the servers and the workers each on a thread with its
// own event loop, over loopback TCP, with short heartbeats and timeouts. A node is killed by
// stopping its thread. tests/integration/recovery_test.cc runs the same faults with processes.
//
// The job is a small MLP in sync mode (40 steps per epoch, a few milliseconds each), so a run
// takes about a second. What each test checks is what a wrong recovery would break: the final
// parameters against a run without faults, bit for bit (a sync run is deterministic when the
// worker count stays the same); the job record's notes, recoveries and replayed steps; and, where
// the coordinator's example ledger covers the whole run, every example used once per epoch.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <regex>
#include <string>
#include <vector>

#include "common/job_spec.h"
#include "tests/coordinator/inprocess_cluster.h"
#include "tests/test_support.h"

using namespace pstrain;
using namespace std::chrono_literals;
using rpc::NodeStop;

namespace {

constexpr auto kJobTimeout = 60s;     // a whole job, faults and recoveries included
constexpr auto kStepTimeout = 30s;    // reaching a step or a backup

// The small MLP in sync mode on 2 servers and 2 workers, backed up every `backup_every` steps.
JobSpec small_job(int epochs, int64_t backup_every) {
  JobSpec spec = testing::mlp_job(64, 32, epochs);
  spec.training.servers = 2;
  spec.training.workers = 2;
  spec.backup.frequency = BackupSpec::Frequency::kSteps;
  spec.backup.steps = backup_every;
  return spec;
}

// The trained parameters of the same job on a cluster of threads without faults.
std::vector<float> uninterrupted(const JobSpec& spec) {
  testing::InProcessCluster cluster;
  const std::string id = cluster.submit(spec);
  const JobRecord r = cluster.wait_finished(id, kJobTimeout);
  REQUIRE_MESSAGE(r.state == JobState::kSucceeded, cluster.describe(id));
  REQUIRE(r.recoveries == 0);
  return cluster.final_params(id);
}

// Bit for bit; the message says how far apart they are if not.
void check_same_params(const std::vector<float>& got, const std::vector<float>& want) {
  REQUIRE(got.size() == want.size());
  size_t differ = 0;
  double worst = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (got[i] == want[i]) continue;
    ++differ;
    worst = std::max(worst, static_cast<double>(std::abs(got[i] - want[i])));
  }
  CHECK_MESSAGE(differ == 0, differ << " of " << got.size() << " parameters differ from an uninterrupted run (max abs "
                                    << worst << ")");
}

bool reached_backup(const JobRecord& r, int64_t step) { return r.last_backup_step.value_or(0) >= step; }

// The rollbacks the job's notes record (JobRunner::replan): the step each went back to and the
// steps it replayed.
struct Rollback {
  int64_t step = 0, replayed = 0;
};
std::vector<Rollback> rollbacks(const JobRecord& r) {
  static const std::regex re("rolled back to step ([0-9]+), ([0-9]+) step\\(s\\) replayed");
  std::vector<Rollback> out;
  std::smatch m;
  for (const auto& note : r.notes) {
    if (std::regex_search(note, m, re)) out.push_back({std::stoll(m[1]), std::stoll(m[2])});
  }
  return out;
}

std::string notes_of(const JobRecord& r) {
  std::string text;
  for (const auto& note : r.notes) text += "\n  " + note;
  return text;
}

// The coordinator's example ledger printed at the end of a sync job: every example of every
// epoch used exactly once by the updates applied.
void check_every_example_once(const std::string& printed, int epochs) {
  static const std::regex re("examples of epoch ([0-9]+): ([0-9]+) used once, ([0-9]+) missing, ([0-9]+) used more than once");
  int audited = 0;
  for (auto it = std::sregex_iterator(printed.begin(), printed.end(), re); it != std::sregex_iterator(); ++it) {
    INFO((*it)[0].str());
    ++audited;
    CHECK(std::stoll((*it)[2]) > 0);
    CHECK((*it)[3] == "0");
    CHECK((*it)[4] == "0");
  }
  CHECK_MESSAGE(audited == epochs, "the ledger of " << audited << " epoch(s) printed, not " << epochs << ":\n"
                                                    << printed);
}

}  // namespace

TEST_CASE("rollback - a server killed and restarted under its name restores the latest complete backup") {
  const JobSpec spec = small_job(3, 10);
  const std::vector<float> reference = uninterrupted(spec);
  testing::InProcessCluster cluster;
  const std::string id = cluster.submit(spec);
  const JobRecord at_kill =
      cluster.wait_for(id, "a complete backup at step 20", [](const JobRecord& r) { return reached_backup(r, 20); }, kStepTimeout);
  cluster.stop_server(1, NodeStop::kNow);
  cluster.start_server(1);
  const JobRecord r = cluster.wait_finished(id, kJobTimeout);
  REQUIRE_MESSAGE(r.state == JobState::kSucceeded, cluster.describe(id));
  INFO("notes:" << notes_of(r));
  // Each recovery went back to the latest complete backup: never before the one complete when
  // the server died, and never more than one backup interval of steps replayed.
  const auto back = rollbacks(r);
  REQUIRE(back.size() >= 1);
  CHECK(r.recoveries == back.size());
  CHECK(r.replayed_steps.size() == back.size());
  CHECK(back[0].step >= *at_kill.last_backup_step);
  for (const auto& b : back) {
    CHECK(b.step % 10 == 0);
    CHECK(b.replayed <= 10);
  }
  check_every_example_once(cluster.printed(), 3);
  check_same_params(cluster.final_params(id), reference);
}
