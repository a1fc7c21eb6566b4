// Faults of a multi-host network on one machine (docs/TESTBED.md): the coordinator, servers and
// workers each in a network namespace of tests/netbed/netbed.sh, with per-node egress limits, and
// the properties that must hold under a frozen server, a partition between the coordinator and one
// server (workers still reach it), a full partition of a server, a frozen worker and a link slowed
// to a crawl: the job finishes, a sync run ends with exactly the parameters of an uninterrupted
// one, every example is used once per epoch, stale nodes are fenced, and the job's notes say what
// happened. Needs root and `ip netns` (tests/netbed/run_netbed_test.sh skips with 77 otherwise).
#include <doctest/doctest.h>

#include <fcntl.h>
#include <sched.h>
#include <unistd.h>

#include <kj/async-io.h>

#include <cmath>
#include <csignal>
#include <cstdlib>
#include <fstream>
#include <regex>
#include <sstream>
#include <thread>

#include "common/data/job_spec.h"
#include "common/rpc/proto/pstrain.capnp.h"
#include "common/rpc/rpc_util.h"
#include "tests/integration/cluster.h"
#include "tests/integration/recovery_support.h"
#include "tests/test_support.h"
#include "worker/local_trainer.h"

using namespace pstrain;
using namespace std::chrono_literals;

namespace {

const std::string kScript = std::string(PSTRAIN_SOURCE_DIR) + "/tests/netbed/netbed.sh";
const std::string kJob = "cli-job";  // the id of the coordinator's --job

std::string shell_output(const std::string& command) {
  std::string out;
  FILE* pipe = popen(command.c_str(), "r");
  REQUIRE(pipe != nullptr);
  char buffer[4096];
  while (size_t n = fread(buffer, 1, sizeof buffer, pipe)) out.append(buffer, n);
  const int status = pclose(pipe);
  INFO(command << "\n" << out);
  REQUIRE(status == 0);
  return out;
}

// One bed (netbed.sh up ... / down), named after this process so that beds of tests running at
// the same time do not meet. The destructor removes it on every exit path.
class Bed {
 public:
  explicit Bed(const std::vector<std::string>& nodes) {
    const char* digits = "0123456789abcdefghijklmnopqrstuvwxyz";
    unsigned v = static_cast<unsigned>(getpid()) % (36 * 36 * 36);
    name_ = "t";
    for (int i = 0; i < 3; ++i, v /= 36) name_ += digits[v % 36];
    std::string command = kScript + " -b " + name_ + " up";
    for (const auto& n : nodes) command += " " + n;
    shell_output(command + " 2>&1");
  }
  ~Bed() { (void)std::system((kScript + " -b " + name_ + " down").c_str()); }
  Bed(const Bed&) = delete;
  Bed& operator=(const Bed&) = delete;

  void run(const std::string& args) { shell_output(kScript + " -b " + name_ + " " + args + " 2>&1"); }
  std::string addr(const std::string& node) {
    std::string a = shell_output(kScript + " -b " + name_ + " addr " + node);
    while (!a.empty() && a.back() == '\n') a.pop_back();
    return a;
  }
  // argv that runs `argv` inside `node`'s namespace (the pid stays the program's: exec all along).
  std::vector<std::string> in(const std::string& node, std::vector<std::string> argv) {
    argv.insert(argv.begin(), {kScript, "-b", name_, "exec", node});
    return argv;
  }
  std::string netns(const std::string& node) const { return "psn-" + name_ + "-" + node; }
  const std::string& name() const { return name_; }

 private:
  std::string name_;
};

using testing::max_difference;
std::string job_json(int64_t epochs, int64_t save_freq) { return testing::recovery_job_json(epochs, save_freq); }
std::vector<float> uninterrupted(const std::string& json) { return testing::uninterrupted_params(json); }

size_t count_matches(const std::string& text, const std::regex& re) {
  return static_cast<size_t>(std::distance(std::sregex_iterator(text.begin(), text.end(), re), std::sregex_iterator()));
}

// Polls `process`'s whole log (every run) until `re` matches at least `count` times.
void wait_for_count(testing::Process& process, const std::regex& re, size_t count, std::chrono::seconds timeout,
                    const std::string& what) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (count_matches(process.log_text(), re) < count) {
    if (std::chrono::steady_clock::now() > deadline) FAIL("timed out waiting for " << what << "\n" << process.log_tail(30));
    std::this_thread::sleep_for(100ms);
  }
}

// A cluster on the bed: coordinator in `c`, servers in s0.., workers in w0.., every node's egress
// limited to `rate`. Fixed ports: each namespace has its own.
class BedCluster {
 public:
  BedCluster(int servers, int workers, const std::string& job_file, const std::string& save_params,
             std::vector<std::string> coordinator_flags, const std::string& rate = "1gbit")
      : bed_(nodes(servers, workers)) {
    for (const auto& n : nodes(servers, workers)) bed_.run("rate " + n + " " + rate);
    coordinator_address_ = bed_.addr("c") + ":7000";
    coordinator_argv_ = {testing::binary("coordinator/pstrain-coordinator"),
                         "--listen", coordinator_address_,
                         "--http", bed_.addr("c") + ":8080",
                         "--state-dir", group_.log_dir() + "/coordinator-state",
                         "--data-dir", testing::data_dir(),
                         "--heartbeat-ms", "200"};
    std::vector<std::string> argv = coordinator_argv_;
    argv.insert(argv.end(), {"--job", job_file, "--exit-when-done", "--save-params", save_params});
    argv.insert(argv.end(), coordinator_flags.begin(), coordinator_flags.end());
    coordinator_ = &group_.start("coordinator", bed_.in("c", argv));
    testing::wait_ready(*coordinator_, 30s);
    for (int i = 0; i < servers; ++i) {
      const std::string node = "s" + std::to_string(i);
      servers_.push_back(&group_.start(
          "server-" + std::to_string(i),
          bed_.in(node, {testing::binary("server/pstrain-server"), "--listen", bed_.addr(node) + ":7100",
                         "--advertise-host", bed_.addr(node), "--coordinator", coordinator_address_, "--name",
                         "server-" + std::to_string(i), "--data-dir",
                         group_.log_dir() + "/server-" + std::to_string(i) + "-data"})));
    }
    for (auto* s : servers_) testing::wait_ready(*s, 30s);
    for (int i = 0; i < workers; ++i) {
      const std::string node = "w" + std::to_string(i);
      workers_.push_back(&group_.start("worker-" + std::to_string(i),
                                       bed_.in(node, {testing::binary("worker/pstrain-worker"), "--coordinator",
                                                      coordinator_address_, "--name", "worker-" + std::to_string(i)})));
    }
  }

  Bed& bed() { return bed_; }
  testing::Process& coordinator() { return *coordinator_; }
  testing::Process& server(size_t i) { return *servers_.at(i); }
  testing::Process& worker(size_t i) { return *workers_.at(i); }

  int wait_job(std::chrono::seconds timeout) {
    const auto code = coordinator_->wait_exit(timeout);
    if (!code) FAIL("the job did not end within " << timeout.count() << " s\n" << group_.dump_logs(30));
    if (*code != 0) MESSAGE("coordinator exited with " << *code << "\n" << group_.dump_logs(30));
    return *code;
  }

  // The job's record as the REST API gives it: a coordinator started again on the same state
  // (without the job), asked from inside its namespace.
  std::string job_status() {
    coordinator_ = &group_.start("coordinator", bed_.in("c", coordinator_argv_));
    testing::wait_ready(*coordinator_, 30s);
    return shell_output(kScript + " -b " + bed_name() + " exec c curl -sS --max-time 10 http://" + bed_.addr("c") +
                        ":8080/v1/jobs/" + kJob);
  }

  std::string dump_logs() { return group_.dump_logs(40); }

 private:
  static std::vector<std::string> nodes(int servers, int workers) {
    std::vector<std::string> n = {"c"};
    for (int i = 0; i < servers; ++i) n.push_back("s" + std::to_string(i));
    for (int i = 0; i < workers; ++i) n.push_back("w" + std::to_string(i));
    return n;
  }
  const std::string& bed_name() const { return bed_.name(); }

  Bed bed_;  // first in, last out: the processes die (group_) before their namespaces go
  testing::ProcessGroup group_;
  std::string coordinator_address_;
  std::vector<std::string> coordinator_argv_;
  testing::Process* coordinator_ = nullptr;
  std::vector<testing::Process*> servers_, workers_;
};

// Calls `versions(job)` on the server at `address` from inside network namespace `netns` (a
// thread of its own joins it: network namespaces are per thread). Returns "" if the server
// answered, else the error.
std::string probe_server(const std::string& netns, const std::string& address, const std::string& job) {
  std::string result = "no answer";
  std::thread([&] {
    const int fd = open(("/run/netns/" + netns).c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0 || setns(fd, CLONE_NEWNET) != 0) {
      result = "cannot enter " + netns;
      return;
    }
    close(fd);
    try {
      auto io = kj::setupAsyncIo();
      auto connection = rpc::connect(*io.provider, rpc::parse_host_port(address, 7100, "address"), {}).wait(io.waitScope);
      auto server = connection->bootstrap().castAs<proto::ParameterServer>();
      auto request = server.versionsRequest();
      request.setJobId(job);
      auto reply = io.provider->getTimer().timeoutAfter(10 * kj::SECONDS, request.send()).wait(io.waitScope);
      result = "";
    } catch (const kj::Exception& e) {
      result = e.getDescription().cStr();
    }
  }).join();
  return result;
}

void check_every_example_once(const std::string& log, int epochs) {
  for (int epoch = 1; epoch <= epochs; ++epoch) {
    INFO("epoch " << epoch);
    CHECK(log.find("examples of epoch " + std::to_string(epoch) + ": 5002 used once, 0 missing, 0 used more than once") !=
          std::string::npos);
  }
}

// The server that lost its place (frozen or cut off from the coordinator) came back: it must have
// registered again as a free server, have dropped the job, and refuse calls about it.
void check_replaced_server_is_fenced(BedCluster& cluster, size_t index) {
  const std::string name = "server-" + std::to_string(index);
  wait_for_count(cluster.coordinator(), std::regex("registered: server '" + name + "'"), 2, 60s,
                 name + " registering again");
  cluster.server(index).wait_for_line(std::regex("job " + kJob + ": dropped"), 30s, "the old server dropping the job");
  const std::string node = "s" + std::to_string(index);
  const std::string answer = probe_server(cluster.bed().netns("w0"), cluster.bed().addr(node) + ":7100", kJob);
  INFO("the old server's answer to versions(" << kJob << "): '" << answer << "'");
  CHECK(answer.find("unknown job") != std::string::npos);
}

}  // namespace

TEST_CASE("netbed - a server frozen past the dead timeout is replaced - resumed, it is fenced and rejoins as a spare") {
  testing::TempDir dir;
  const std::string json = job_json(2, 10);
  BedCluster cluster(3, 2, testing::write_spec(dir.path(), "job.json", json), dir.file("final.bin"),
                     {"--dead-after-ms", "1500", "--move-server-after-ms", "1000"});
  cluster.coordinator().wait_for_line("backup at step 20 complete", 90s);
  cluster.bed().run("fault freeze s1");
  cluster.coordinator().wait_for_line("server 'server-1' did not come back; moving its shard to 'server-2'", 60s);
  cluster.coordinator().wait_for_line("RUNNING again from step", 60s);
  cluster.bed().run("fault thaw s1");
  check_replaced_server_is_fenced(cluster, 1);
  REQUIRE(cluster.wait_job(240s) == 0);
  const std::string log = cluster.coordinator().log_text();
  check_every_example_once(log, 2);
  const double diff = max_difference(testing::read_floats(dir.file("final.bin")), uninterrupted(json));
  MESSAGE("max abs difference to an uninterrupted run " << diff);
  CHECK(diff <= 1e-5);
  const std::string status = cluster.job_status();
  INFO(status);
  CHECK(status.find("\"state\":\"SUCCEEDED\"") != std::string::npos);
  CHECK(status.find("server 'server-1' did not come back: its shard moved to 'server-2'") != std::string::npos);
  CHECK(status.find("server 'server-1' came back after its shard moved: it dropped the job") != std::string::npos);
}

TEST_CASE("netbed - coordinator and a server cut off from each other, workers reach both: no split brain") {
  testing::TempDir dir;
  const std::string json = job_json(2, 10);
  BedCluster cluster(3, 2, testing::write_spec(dir.path(), "job.json", json), dir.file("final.bin"),
                     {"--dead-after-ms", "1500", "--move-server-after-ms", "1000"});
  cluster.coordinator().wait_for_line("backup at step 20 complete", 90s);
  cluster.bed().run("fault cut c s1");
  cluster.coordinator().wait_for_line("server 'server-1' did not come back; moving its shard to 'server-2'", 60s);
  cluster.coordinator().wait_for_line("RUNNING again from step", 60s);
  // The workers still reach server-1, but the job no longer uses it: a backup on the new plan
  // (server-2 in server-1's place) completes while the partition lasts.
  const std::regex backups("backup at step [0-9]+ complete");
  wait_for_count(cluster.coordinator(), backups, count_matches(cluster.coordinator().log_text(), backups) + 1, 60s,
                 "a backup on the new plan");
  cluster.bed().run("fault heal c s1");
  check_replaced_server_is_fenced(cluster, 1);
  REQUIRE(cluster.wait_job(240s) == 0);
  const std::string log = cluster.coordinator().log_text();
  // The other server went on writing backups while server-1's stopped completing: it kept the
  // complete one the job rolled back to (it once pruned it and the job restarted from step 0).
  CHECK(log.find("unusable") == std::string::npos);
  CHECK(std::regex_search(log, std::regex("RUNNING again from step [1-9]")));
  check_every_example_once(log, 2);
  const double diff = max_difference(testing::read_floats(dir.file("final.bin")), uninterrupted(json));
  MESSAGE("max abs difference to an uninterrupted run " << diff);
  CHECK(diff <= 1e-5);
  const std::string status = cluster.job_status();
  INFO(status);
  CHECK(status.find("its shard moved to 'server-2'") != std::string::npos);
}

TEST_CASE("netbed - a server's link down past the dead timeout and back: rolled back, same parameters") {
  testing::TempDir dir;
  const std::string json = job_json(2, 10);
  // No free server: the lost one must come back under its name and restore its own backup.
  BedCluster cluster(2, 2, testing::write_spec(dir.path(), "job.json", json), dir.file("final.bin"),
                     {"--dead-after-ms", "1500"});
  cluster.coordinator().wait_for_line("backup at step 20 complete", 90s);
  cluster.bed().run("fault link-down s1");
  cluster.coordinator().wait_for_line("'server-1'\\) missed its heartbeats: declared dead", 60s);
  std::this_thread::sleep_for(1s);
  cluster.bed().run("fault link-up s1");
  REQUIRE(cluster.wait_job(240s) == 0);
  const std::string log = cluster.coordinator().log_text();
  CHECK(log.find("RUNNING again from step") != std::string::npos);
  // Each worker's session of the old plan was ended by the coordinator at once (its watch call),
  // not left waiting on a server connection that may never answer.
  for (size_t i = 0; i < 2; ++i) {
    INFO("worker-" << i);
    CHECK(cluster.worker(i).log_text().find("the coordinator ended this plan") != std::string::npos);
  }
  check_every_example_once(log, 2);
  const double diff = max_difference(testing::read_floats(dir.file("final.bin")), uninterrupted(json));
  MESSAGE("max abs difference to an uninterrupted run " << diff);
  CHECK(diff <= 1e-5);
  const std::string status = cluster.job_status();
  INFO(status);
  CHECK(status.find("\"state\":\"SUCCEEDED\"") != std::string::npos);
  CHECK(std::regex_search(status, std::regex("\"recoveries\":\\{\"count\":[1-9]")));
}

TEST_CASE("netbed - a worker frozen past the dead timeout is fenced when resumed - no step applied twice") {
  testing::TempDir dir;
  const std::string json = job_json(2, 10);
  BedCluster cluster(2, 2, testing::write_spec(dir.path(), "job.json", json), dir.file("final.bin"),
                     {"--dead-after-ms", "1500"});
  cluster.coordinator().wait_for_line("backup at step 20 complete", 90s);
  cluster.bed().run("fault freeze w1");
  cluster.coordinator().wait_for_line("'worker-1'\\) missed its heartbeats: declared dead", 60s);
  cluster.coordinator().wait_for_line("RUNNING again from step|takes over worker", 60s);
  cluster.bed().run("fault thaw w1");
  // The resumed worker's session is of an old plan: its next call is refused and it ends it.
  cluster.worker(1).wait_for_line(std::regex("session ended"), 60s, "the resumed worker's session ending");
  REQUIRE(cluster.wait_job(240s) == 0);
  const std::string log = cluster.coordinator().log_text();
  check_every_example_once(log, 2);
  const std::string status = cluster.job_status();
  INFO(status);
  CHECK(status.find("\"state\":\"SUCCEEDED\"") != std::string::npos);
}

TEST_CASE("netbed - a worker's link slowed to a crawl and back: same parameters") {
  testing::TempDir dir;
  const std::string json = job_json(2, 10);
  // A crawl is not a death: the dead timeout is well above the crawl (4 s) and the TCP back-off
  // after it, so the property is that slowness alone changes nothing.
  BedCluster cluster(2, 2, testing::write_spec(dir.path(), "job.json", json), dir.file("final.bin"),
                     {"--dead-after-ms", "20000"}, "100mbit");
  cluster.coordinator().wait_for_line("backup at step 10 complete", 90s);
  cluster.bed().run("fault crawl w0 256kbit");
  std::this_thread::sleep_for(4s);
  cluster.bed().run("fault uncrawl w0");
  REQUIRE(cluster.wait_job(240s) == 0);
  const std::string log = cluster.coordinator().log_text();
  INFO("coordinator log:\n" << cluster.coordinator().log_tail(60));
  CHECK(log.find("declared dead") == std::string::npos);  // no takeover, no rollback:
  CHECK(log.find("RUNNING again") == std::string::npos);  // one plan all along
  check_every_example_once(log, 2);
  const double diff = max_difference(testing::read_floats(dir.file("final.bin")), uninterrupted(json));
  MESSAGE("max abs difference to an uninterrupted run " << diff);
  CHECK(diff <= 1e-5);
}
