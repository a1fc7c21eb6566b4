// Preemption and recovery with real processes (docs/DESIGN-NOTES.md "Backups and recovery"):
// kill -9 or SIGTERM a server, a worker or the coordinator mid-run, corrupt a backup, and check
// what was lost.
#include <doctest/doctest.h>

#include <sys/stat.h>

#include <cmath>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <thread>

#include "common/data/job_spec.h"
#include "common/engine/nn/onednn_conv.h"
#include "tests/integration/cluster.h"
#include "tests/integration/http_test_client.h"
#include "tests/integration/recovery_support.h"
#include "tests/test_support.h"
#include "worker/local_trainer.h"

using namespace pstrain;
using namespace std::chrono_literals;

namespace {

using testing::max_difference;
std::string job_json(int64_t epochs, int64_t save_freq) { return testing::recovery_job_json(epochs, save_freq); }
std::vector<float> uninterrupted(const std::string& json) { return testing::uninterrupted_params(json); }

// The replayed step counts the coordinator logged ("... N step(s) to replay"), in order.
std::vector<int> replayed_steps(const std::string& log) {
  std::vector<int> out;
  static const std::regex re("RUNNING again from step [0-9]+ with [0-9]+ worker\\(s\\); ([0-9]+) step");
  for (auto it = std::sregex_iterator(log.begin(), log.end(), re); it != std::sregex_iterator(); ++it) {
    out.push_back(std::stoi((*it)[1]));
  }
  return out;
}

// Each recovery went back to the newest backup complete before it (never an older one), one at or
// after `at_least`: what a rollback promises. It may be newer than the newest the log calls
// complete before the recovery line: the servers report the versions they hold durably when the
// recovery asks, and a backup every server had written may not have been logged complete yet (seen
// on a fast machine: the restore from step 30 came before "backup at step 30 complete"). How many steps that replays depends on how far the
// workers got before the failure was seen (timing: on a loaded machine, more than a backup
// interval), so it is reported, not bounded.
void check_restored_latest_backup(const std::string& log, int at_least) {
  static const std::regex again("RUNNING again from step ([0-9]+) with [0-9]+ worker\\(s\\); ([0-9]+) step");
  static const std::regex backup("backup at step ([0-9]+) complete");
  int recoveries = 0;
  for (auto it = std::sregex_iterator(log.begin(), log.end(), again); it != std::sregex_iterator(); ++it) {
    const int restored = std::stoi((*it)[1]);
    const std::string before = log.substr(0, static_cast<size_t>(it->position()));
    int newest = -1;
    for (auto b = std::sregex_iterator(before.begin(), before.end(), backup); b != std::sregex_iterator(); ++b) {
      newest = std::max(newest, std::stoi((*b)[1]));
    }
    CAPTURE(restored);
    CAPTURE(newest);
    CHECK(restored >= newest);
    CHECK(restored >= at_least);
    MESSAGE("recovery " << ++recoveries << ": from the backup at step " << restored << ", " << (*it)[2] << " step(s) replayed");
  }
  CHECK(recoveries >= 1);
}

}  // namespace

TEST_CASE("kill -9 of a server then a restart recovers and ends with the uninterrupted parameters") {
  testing::TempDir dir;
  const std::string json = job_json(3, 10);
  testing::Cluster cluster({.job_file = testing::write_spec(dir.path(), "job.json", json),
                            .save_params = dir.file("final.bin")});
  cluster.coordinator().wait_for_line("backup at step 20 complete", 60s);
  cluster.stop_server(1, /*hard=*/true);
  cluster.start_server(1);
  REQUIRE(cluster.wait_job(180s) == 0);
  const std::string log = cluster.coordinator().log_text();
  // At most the steps since the latest complete backup (the server died after the one of step 20).
  check_restored_latest_backup(log, 20);
  const double diff = max_difference(testing::read_floats(dir.file("final.bin")), uninterrupted(json));
  MESSAGE("max abs difference to an uninterrupted run " << diff);
  CHECK(diff <= 1e-5);
}

TEST_CASE("a server that never comes back is replaced by a free one from its backup replica") {
  testing::TempDir dir;
  const std::string json = job_json(3, 10);
  // Three servers; the job takes two (server-0, server-1), server-2 stays free.
  testing::Cluster cluster({.job_file = testing::write_spec(dir.path(), "job.json", json),
                            .save_params = dir.file("final.bin"),
                            .servers = 3,
                            .coordinator_flags = {"--dead-after-ms", "1500", "--move-server-after-ms", "1000"}});
  cluster.coordinator().wait_for_line("backup at step 20 complete", 60s);
  cluster.servers()[1]->kill_hard();  // and never restarted
  REQUIRE(cluster.wait_job(180s) == 0);
  const std::string log = cluster.coordinator().log_text();
  CHECK(std::regex_search(log, std::regex("server 'server-1' did not come back; moving its shard to 'server-2'")));
  check_restored_latest_backup(log, 20);  // as in the test above
  // The new server restored the lost one's backup: the run is still deterministic.
  const double diff = max_difference(testing::read_floats(dir.file("final.bin")), uninterrupted(json));
  MESSAGE("max abs difference to an uninterrupted run " << diff);
  CHECK(diff <= 1e-5);
}

TEST_CASE("after a server's shard moved, a coordinator restart finds every server at its index") {
  testing::TempDir dir;
  const std::string json = job_json(4, 10);
  testing::Cluster cluster({.job_file = testing::write_spec(dir.path(), "job.json", json),
                            .save_params = dir.file("final.bin"),
                            .servers = 3,
                            .coordinator_flags = {"--dead-after-ms", "1500", "--move-server-after-ms", "1000"}});
  cluster.coordinator().wait_for_line("backup at step 20 complete", 60s);
  cluster.servers()[1]->kill_hard();
  cluster.coordinator().wait_for_line("RUNNING again from step", 60s);
  cluster.coordinator().wait_for_line("backup at step [0-9]+ complete", 60s);
  // The job now runs on server-0 and server-2; the restarted coordinator must put server-2 (not
  // server-1, which is gone) at index 1, where its backups belong.
  cluster.restart_coordinator(/*hard=*/true);
  REQUIRE(cluster.wait_job(180s) == 0);
  const std::string log = cluster.coordinator().log_text();
  CHECK(std::regex_search(log, std::regex("took over the servers' state at step|resuming from the backup at step")));
  const double diff = max_difference(testing::read_floats(dir.file("final.bin")), uninterrupted(json));
  MESSAGE("max abs difference to an uninterrupted run " << diff);
  CHECK(diff <= 1e-5);
}

TEST_CASE("SIGTERM to a server backs up first so no step is replayed") {
  testing::TempDir dir;
  const std::string json = job_json(3, 1000);  // no regular backup would help here
  testing::Cluster cluster({.job_file = testing::write_spec(dir.path(), "job.json", json),
                            .save_params = dir.file("final.bin")});
  cluster.coordinator().wait_for_line("epoch 1 step 20", 60s);
  cluster.stop_server(0, /*hard=*/false);  // SIGTERM, and wait for it to leave
  CHECK(cluster.servers()[0]->exit_status()->code == 0);
  cluster.start_server(0);
  REQUIRE(cluster.wait_job(180s) == 0);
  const auto replayed = replayed_steps(cluster.coordinator().log_text());
  REQUIRE(replayed.size() >= 1);
  CHECK(replayed[0] == 0);
  CHECK(max_difference(testing::read_floats(dir.file("final.bin")), uninterrupted(json)) <= 1e-5);
}

TEST_CASE("kill -9 of a worker mid-epoch - the job finishes on the other worker, as the uninterrupted run") {
  testing::TempDir dir;
  const std::string json = job_json(3, 10);
  testing::Cluster cluster({.job_file = testing::write_spec(dir.path(), "job.json", json),
                            .save_params = dir.file("final.bin"),
                            .coordinator_flags = {"--dead-after-ms", "1500"}});
  cluster.coordinator().wait_for_line("backup at step 20 complete", 60s);
  cluster.workers()[1]->kill_hard();
  REQUIRE(cluster.wait_job(180s) == 0);
  const std::string log = cluster.coordinator().log_text();
  // The survivor computed the lost worker's slice of the unfinished step: nothing rolled back.
  CHECK(std::regex_search(log, std::regex("worker [01] takes over worker [01]'s slice of step [0-9]+")));
  CHECK(log.find("with 1 worker(s); 0 step(s) to replay") != std::string::npos);
  // The survivor computes the lost slice of every later step too (an extra slice): the run ends
  // with the uninterrupted parameters.
  CHECK(max_difference(testing::read_floats(dir.file("final.bin")), uninterrupted(json)) == 0);
  // The coordinator's ledger of the examples behind the applied updates: every example of every
  // epoch exactly once, although a worker died mid-epoch.
  for (int epoch = 1; epoch <= 3; ++epoch) {
    INFO("epoch " << epoch);
    CHECK(log.find("examples of epoch " + std::to_string(epoch) + ": 5002 used once, 0 missing, 0 used more than once") !=
          std::string::npos);
  }
}

TEST_CASE("kill -9 of a worker in a mixed_bfloat16 residual CNN: the run is the uninterrupted one bit for bit") {
  // bfloat16 convolutions (where the CPU has them; float32 with a log line elsewhere, as on the
  // capped levels' runs), batch norms with their ReLUs fused, a residual add with its ReLU fused,
  // augmentation and dropout: every piece keeps the exactness of a recovered run.
  testing::TempDir dir;
  const std::string json = R"({
    "name": "residual-bf16",
    "dataset": {"name": "mnist10k", "shuffle_seed": 3},
    "precision": "mixed_bfloat16",
    "model": {"input_shape": [28, 28, 1], "seed": 2, "layers": [
      {"type": "random_crop", "padding": 2},
      {"type": "conv2d", "filters": 16, "kernel_size": 3, "strides": 2, "padding": "same", "use_bias": false},
      {"type": "batch_norm"},
      {"type": "activation", "activation": "relu", "name": "stem"},
      {"type": "conv2d", "filters": 16, "kernel_size": 3, "padding": "same", "use_bias": false},
      {"type": "batch_norm", "name": "block"},
      {"type": "add", "inputs": ["stem", "block"]},
      {"type": "activation", "activation": "relu"},
      {"type": "global_avgpool2d"},
      {"type": "dropout", "rate": 0.2},
      {"type": "dense", "units": 10}
    ]},
    "optimizer": {"type": "adam"},
    "training": {"mode": "sync", "global_batch_size": 128, "epochs": 2, "servers": 2, "workers": 2},
    "backup": {"save_freq": 10}
  })";
  testing::Cluster cluster({.job_file = testing::write_spec(dir.path(), "job.json", json),
                            .save_params = dir.file("final.bin"),
                            .coordinator_flags = {"--dead-after-ms", "1500"}});
  cluster.coordinator().wait_for_line("backup at step 20 complete", 90s);
  cluster.workers()[1]->kill_hard();
  REQUIRE(cluster.wait_job(180s) == 0);
  const std::string worker_log = cluster.workers()[0]->log_text();
  CHECK(worker_log.find(nn::onednn_bf16() ? "1 convolution(s) and 1 dense layer(s) compute their products in bfloat16"
                                          : "training in float32") != std::string::npos);
  CHECK(std::regex_search(cluster.coordinator().log_text(), std::regex("worker [01] takes over worker [01]'s slice")));
  const double diff = max_difference(testing::read_floats(dir.file("final.bin")), uninterrupted(json));
  MESSAGE("recovered against uninterrupted: max abs difference " << diff
                                                                  << std::string(nn::onednn_bf16() ? " (bfloat16)" : " (float32)"));
  CHECK(diff == 0);
}

TEST_CASE("SIGTERM to a worker hands its work back so no step is replayed, and the run is the uninterrupted one") {
  testing::TempDir dir;
  const std::string json = job_json(3, 1000);
  testing::Cluster cluster({.job_file = testing::write_spec(dir.path(), "job.json", json),
                            .save_params = dir.file("final.bin")});
  cluster.coordinator().wait_for_line("epoch 1 step 20", 60s);
  CHECK(cluster.workers()[1]->terminate(30s).code == 0);
  REQUIRE(cluster.wait_job(180s) == 0);
  const std::string log = cluster.coordinator().log_text();
  const auto replayed = replayed_steps(log);
  REQUIRE(replayed.size() >= 1);
  CHECK(replayed[0] == 0);
  CHECK(log.find("with 1 worker(s)") != std::string::npos);
  CHECK(max_difference(testing::read_floats(dir.file("final.bin")), uninterrupted(json)) == 0);
  for (int epoch = 1; epoch <= 3; ++epoch) {
    INFO("epoch " << epoch);
    CHECK(log.find("examples of epoch " + std::to_string(epoch) + ": 5002 used once, 0 missing, 0 used more than once") !=
          std::string::npos);
  }
}

TEST_CASE("a worker frozen (SIGSTOP) mid-run is taken over, the run is the uninterrupted one, and thawed it rejoins") {
  testing::TempDir dir;
  const std::string json = job_json(3, 10);
  testing::Cluster cluster({.job_file = testing::write_spec(dir.path(), "job.json", json),
                            .save_params = dir.file("final.bin"),
                            .coordinator_flags = {"--dead-after-ms", "1500"}});
  cluster.coordinator().wait_for_line("backup at step 20 complete", 60s);
  REQUIRE(cluster.workers()[1]->signal(SIGSTOP));
  cluster.coordinator().wait_for_line("with 1 worker\\(s\\)", 60s);
  REQUIRE(cluster.workers()[1]->signal(SIGCONT));  // its session is stale; it registers anew
  REQUIRE(cluster.wait_job(180s) == 0);
  const std::string log = cluster.coordinator().log_text();
  CHECK(std::regex_search(log, std::regex("missed its heartbeats")));
  CHECK(max_difference(testing::read_floats(dir.file("final.bin")), uninterrupted(json)) == 0);
  for (int epoch = 1; epoch <= 3; ++epoch) {
    INFO("epoch " << epoch);
    CHECK(log.find("examples of epoch " + std::to_string(epoch) + ": 5002 used once, 0 missing, 0 used more than once") !=
          std::string::npos);
  }
}

TEST_CASE("two workers killed at once - the job finishes on the third, uses every example once, exactly") {
  testing::TempDir dir;
  JobSpec spec = parse_job_spec(job_json(3, 10));
  spec.training.workers = 3;
  testing::Cluster cluster({.job_file = testing::write_spec(dir.path(), "job.json", job_spec_to_json(spec)),
                            .save_params = dir.file("final.bin"),
                            .workers = 3,
                            .coordinator_flags = {"--dead-after-ms", "1500"}});
  cluster.coordinator().wait_for_line("backup at step 20 complete", 60s);
  cluster.workers()[1]->kill_hard();
  cluster.workers()[2]->kill_hard();
  REQUIRE(cluster.wait_job(180s) == 0);
  const std::string log = cluster.coordinator().log_text();
  CHECK(log.find("with 1 worker(s)") != std::string::npos);
  CHECK(cluster.final_accuracy() >= 0.92);
  // Rolled back or taken over, the survivor computes all three slices of each later step.
  LocalTrainerOptions options;
  options.data_dir = testing::data_dir();
  options.replicas = 3;
  options.servers = 2;
  const TrainingResult reference = train_locally(spec, options);
  CHECK(max_difference(testing::read_floats(dir.file("final.bin")), {reference.params.begin(), reference.params.end()}) ==
        0);
  for (int epoch = 1; epoch <= 3; ++epoch) {
    INFO("epoch " << epoch);
    CHECK(log.find("examples of epoch " + std::to_string(epoch) + ": 5002 used once, 0 missing, 0 used more than once") !=
          std::string::npos);
  }
}

TEST_CASE("a new worker joins a job that lost one at the next step, and the run is the uninterrupted one") {
  testing::TempDir dir;
  const std::string json = job_json(4, 10);
  testing::Cluster cluster({.job_file = testing::write_spec(dir.path(), "job.json", json),
                            .save_params = dir.file("final.bin"),
                            .coordinator_flags = {"--dead-after-ms", "1500"}});
  cluster.coordinator().wait_for_line("backup at step 20 complete", 60s);
  cluster.workers()[1]->kill_hard();
  cluster.coordinator().wait_for_line("with 1 worker\\(s\\)", 60s);
  // A replacement worker registers: the job takes it in without replaying anything.
  cluster.group().start("worker-2", {testing::binary("worker/pstrain-worker"), "--coordinator",
                                     "127.0.0.1:" + std::to_string(cluster.coordinator_port()), "--name", "worker-2"});
  REQUIRE(cluster.wait_job(180s) == 0);
  const std::string log = cluster.coordinator().log_text();
  CHECK(log.find("a free worker can join") != std::string::npos);
  CHECK(log.find("with 2 worker(s); 0 step(s) to replay") != std::string::npos);
  CHECK(max_difference(testing::read_floats(dir.file("final.bin")), uninterrupted(json)) == 0);
  for (int epoch = 1; epoch <= 4; ++epoch) {
    INFO("epoch " << epoch);
    CHECK(log.find("examples of epoch " + std::to_string(epoch) + ": 5002 used once, 0 missing, 0 used more than once") !=
          std::string::npos);
  }
  CHECK(cluster.final_accuracy() >= 0.92);
}

TEST_CASE("kill -9 of the coordinator then a restart ends with the uninterrupted parameters") {
  testing::TempDir dir;
  const std::string json = job_json(3, 10);
  testing::Cluster cluster({.job_file = testing::write_spec(dir.path(), "job.json", json),
                            .save_params = dir.file("final.bin")});
  cluster.coordinator().wait_for_line("backup at step 30 complete", 60s);
  cluster.restart_coordinator(/*hard=*/true);
  REQUIRE(cluster.wait_job(180s) == 0);
  // The servers still held the job: the restarted coordinator went on from their state (the
  // workers' sessions ended at a step boundary), so nothing was replayed.
  const std::string log = cluster.coordinator().log_text();
  CHECK(std::regex_search(log, std::regex("took over the servers' state at step [0-9]+ after a coordinator restart; 0 step")));
  CHECK(max_difference(testing::read_floats(dir.file("final.bin")), uninterrupted(json)) <= 1e-5);
}

TEST_CASE("workers keep training while the coordinator is down and nothing is lost") {
  testing::TempDir dir;
  const std::string json = job_json(4, 1000);
  testing::Cluster cluster({.job_file = testing::write_spec(dir.path(), "job.json", json),
                            .save_params = dir.file("final.bin")});
  // Early in epoch 2 (steps 40-79): the workers hold the rest of the epoch's data already.
  const auto m = cluster.coordinator().wait_for_line("epoch 2 step ([0-9]+)", 60s);
  const int step_at_kill = std::stoi(m[1]);
  cluster.restart_coordinator(/*hard=*/true, std::chrono::milliseconds(1500));
  REQUIRE(cluster.wait_job(180s) == 0);
  const std::string log = cluster.coordinator().log_text();
  std::smatch taken;
  REQUIRE(std::regex_search(log, taken, std::regex("took over the servers' state at step ([0-9]+)")));
  MESSAGE("coordinator killed at step " << step_at_kill << "; the servers were at step " << taken[1]
                                        << " when it came back");
  // The workers trained on while the coordinator was down (to the end of the epoch's data).
  CHECK(std::stoi(taken[1]) > step_at_kill);
  CHECK(max_difference(testing::read_floats(dir.file("final.bin")), uninterrupted(json)) <= 1e-5);
}

TEST_CASE("a corrupted latest backup falls back to the one before and says so") {
  testing::TempDir dir;
  // Backups 30 steps apart: the servers write the next one (step 90) well after the coordinator
  // has seen step 60's complete, so the newest record on disk is the latest complete backup (with
  // backups 10 steps apart, a fast server had written the next one before the coordinator logged
  // the last as complete, and the corruption hit a backup nobody restores).
  const std::string json = job_json(3, 30);
  testing::Cluster cluster({.job_file = testing::write_spec(dir.path(), "job.json", json),
                            .save_params = dir.file("final.bin")});
  cluster.coordinator().wait_for_line("backup at step 60 complete", 60s);
  // The workers frozen while the server dies and its log is corrupted: no step, so no newer backup
  // record, can land on disk meanwhile (far shorter than the time a frozen worker is declared dead).
  for (auto* w : cluster.workers()) REQUIRE(w->signal(SIGSTOP));
  std::this_thread::sleep_for(200ms);
  cluster.stop_server(1, /*hard=*/true);
  // Flip bytes inside the newest write-ahead log record (the latest backup) of server 1.
  const std::string data = cluster.group().log_dir() + "/server-1-data";
  std::filesystem::path newest;
  for (const auto& e : std::filesystem::directory_iterator(data)) {
    if (e.path().extension() == ".log" && (newest.empty() || e.path().filename() > newest.filename())) newest = e.path();
  }
  REQUIRE(!newest.empty());
  const auto size = std::filesystem::file_size(newest);
  REQUIRE(size > 4096);
  {
    std::fstream f(newest, std::ios::in | std::ios::out | std::ios::binary);
    for (uint64_t at = size - 2048; at < size - 1024; at += 97) {
      f.seekp(static_cast<std::streamoff>(at));
      f.put('\x5a');
    }
  }
  for (auto* w : cluster.workers()) REQUIRE(w->signal(SIGCONT));
  cluster.start_server(1);
  REQUIRE(cluster.wait_job(180s) == 0);
  const std::string log = cluster.coordinator().log_text();
  CHECK(log.find("unusable") != std::string::npos);
  CHECK(log.find("falling back to the one before") != std::string::npos);
  CHECK(max_difference(testing::read_floats(dir.file("final.bin")), uninterrupted(json)) <= 1e-5);
}

TEST_CASE("async - kill -9 of a server then a restart recovers from a consistent cut") {
  testing::TempDir dir;
  JobSpec spec = testing::mlp_job(700, 500, 3);
  spec.training.mode = TrainingMode::kAsync;
  spec.training.servers = 2;
  spec.training.workers = 2;
  spec.backup.frequency = BackupSpec::Frequency::kSteps;
  spec.backup.steps = 20;
  testing::Cluster cluster({.job_file = testing::write_spec(dir.path(), "job.json", job_spec_to_json(spec))});
  // Workers pause between steps, every server backs up its shard at one version, workers go on.
  cluster.coordinator().wait_for_line("backup at step [0-9]+ complete on all 2", 60s);
  cluster.stop_server(1, /*hard=*/true);
  cluster.start_server(1);
  REQUIRE(cluster.wait_job(180s) == 0);
  const std::string log = cluster.coordinator().log_text();
  CHECK(log.find("consistent cut at step") != std::string::npos);
  // Rolled back to a cut and replayed only the steps after it (a cut every ~20 steps; progress
  // reports every 10 steps per worker decide when).
  const auto replayed = replayed_steps(log);
  REQUIRE(replayed.size() >= 1);
  for (int r : replayed) CHECK(r <= 60);
  CHECK(cluster.final_accuracy() >= 0.90);
}

TEST_CASE("async - a new worker takes the place of a killed one and the job finishes") {
  testing::TempDir dir;
  // Long enough (12 epochs, ~5 s) that the other worker is still training when the replacement
  // arrives: once every live worker has finished, an async job ends without the lost shard.
  JobSpec spec = testing::mlp_job(700, 500, 12);
  spec.training.mode = TrainingMode::kAsync;
  spec.training.servers = 2;
  spec.training.workers = 2;
  testing::Cluster cluster({.job_file = testing::write_spec(dir.path(), "job.json", job_spec_to_json(spec)),
                            .coordinator_flags = {"--dead-after-ms", "1000"}});
  cluster.coordinator().wait_for_line("epoch 1 step 20", 60s);
  cluster.workers()[1]->kill_hard();
  cluster.coordinator().wait_for_line("lost .*the others go on", 60s);
  cluster.group().start("worker-2", {testing::binary("worker/pstrain-worker"), "--coordinator",
                                     "127.0.0.1:" + std::to_string(cluster.coordinator_port()), "--name", "worker-2"});
  REQUIRE(cluster.wait_job(180s) == 0);
  const std::string log = cluster.coordinator().log_text();
  CHECK(std::regex_search(log, std::regex("takes the place of lost worker [01] from its step [0-9]+")));
  // The lost worker's shard was finished by its replacement, so the job trained on (almost)
  // everything: the accuracy of a run without faults.
  CHECK(cluster.final_accuracy() >= 0.92);
}

TEST_CASE("async - kill -9 of the coordinator then a restart resumes every worker from the stored cut") {
  testing::TempDir dir;
  JobSpec spec = testing::mlp_job(700, 500, 6);
  spec.training.mode = TrainingMode::kAsync;
  spec.training.servers = 2;
  spec.training.workers = 3;
  spec.backup.frequency = BackupSpec::Frequency::kSteps;
  spec.backup.steps = 60;
  testing::Cluster cluster({.job_file = testing::write_spec(dir.path(), "job.json", job_spec_to_json(spec)),
                            .workers = 3});
  // Past the second complete cut (the first at about step 60-90, the second past 100): the first
  // one's positions have long been in the coordinator's RocksDB. The workers go on with their
  // buffered data while the coordinator is down, so the servers end up past the last cut.
  cluster.coordinator().wait_for_line("backup at step [1-9][0-9][0-9]+ complete on all 2", 60s);
  cluster.restart_coordinator(/*hard=*/true);
  REQUIRE(cluster.wait_job(180s) == 0);

  const std::string log = cluster.coordinator().log_text();
  const std::string restart_marker = "[process_harness] start coordinator";
  const size_t second = log.find(restart_marker, log.find(restart_marker) + 1);
  REQUIRE(second != std::string::npos);
  const std::string before = log.substr(0, second), after = log.substr(second);

  // The cuts of the first life, with the workers' positions, and which of them completed.
  std::map<int, std::string> cut_positions;
  static const std::regex cut_re("consistent cut at step ([0-9]+) \\([0-9]+ worker\\(s\\) paused; workers (.*?)\\); backing up");
  for (auto it = std::sregex_iterator(before.begin(), before.end(), cut_re); it != std::sregex_iterator(); ++it) {
    cut_positions[std::stoi((*it)[1])] = (*it)[2];
  }
  std::set<int> complete;
  static const std::regex done_re("backup at step ([0-9]+) complete on all 2");
  for (auto it = std::sregex_iterator(before.begin(), before.end(), done_re); it != std::sregex_iterator(); ++it) {
    complete.insert(std::stoi((*it)[1]));
  }
  REQUIRE(complete.size() >= 2);

  // The restarted coordinator resumed from the newest cut of the first life that every server
  // held (the servers back up only once the cut's positions are on disk), with exactly the
  // positions of that cut, not from zero.
  std::string events;  // what the two lives said about cuts, backups, restarts and losses (on failure)
  {
    std::istringstream lines(log);
    static const std::regex worth("cut|backup|resum|restart|start|over|RECOVER|RUNNING|lost|FAIL|configur|harness");
    for (std::string line; std::getline(lines, line);) {
      if (std::regex_search(line, worth)) events += line + "\n";
    }
  }
  INFO("the coordinator's log, filtered:\n" << events);
  std::smatch resumed;
  REQUIRE(std::regex_search(after, resumed,
                            std::regex("async job resumed from the consistent cut at step ([0-9]+) after a coordinator "
                                       "restart \\(workers (.*?)\\); the servers had reached step ([0-9]+): "
                                       "([0-9]+) step\\(s\\) to replay")));
  const int cut = std::stoi(resumed[1]);
  const int reached = std::stoi(resumed[3]), replayed = std::stoi(resumed[4]);
  CHECK(cut > 0);
  CHECK(cut >= *complete.rbegin());
  REQUIRE(cut_positions.count(cut) == 1);
  CHECK(resumed[2].str() == cut_positions[cut]);
  CHECK(reached >= cut);
  CHECK(replayed == reached - cut);
  // Nothing in the second life started over: no progress report below the cut's positions. Each
  // worker's first report comes after its resumed steps (reports every 10 steps or at an epoch end).
  CHECK(after.find("starts over") == std::string::npos);

  // Every chunk took each planned step exactly once in the surviving timeline: the steps after the
  // cut were undone on the servers by the restore and redone once; none was skipped.
  std::smatch updates;
  REQUIRE(std::regex_search(after, updates,
                            std::regex("every chunk took ([0-9]+) to ([0-9]+) push\\(es\\); planned steps: ([0-9]+)")));
  CHECK(updates[1].str() == updates[3].str());
  CHECK(updates[2].str() == updates[3].str());
  MESSAGE("killed after the cut at step " << *complete.rbegin() << "; resumed from the cut at step " << cut
                                           << "; the servers had reached step " << reached << ": " << replayed
                                           << " step(s) redone; pushes per chunk " << updates[1] << " of "
                                           << updates[3] << " planned");
  CHECK(cluster.final_accuracy() >= 0.90);
}

TEST_CASE("a coordinator killed -9 between an epoch's last step and its evaluation: the restart evaluates it") {
  // One step per epoch (the global batch is the whole train split): the workers evaluate after
  // every step, and a coordinator killed mid-step leaves the servers at an epoch's end whose
  // evaluation no worker reported (it needs the coordinator's test stream). The restarted
  // coordinator has the workers evaluate that epoch first: the history has every epoch, with the
  // uninterrupted run's test figures.
  using namespace pstrain::testing::http_test;
  const std::string spec = R"({"name": "boundary", "dataset": {"name": "mnist10k", "shuffle_seed": 1},
    "model": {"input_shape": [28, 28, 1], "seed": 2, "layers": [{"type": "flatten"}, {"type": "dense", "units": 10}]},
    "optimizer": {"type": "sgd", "learning_rate": 0.5},
    "training": {"mode": "sync", "global_batch_size": 10000, "epochs": 6, "workers": 1, "servers": 1}})";
  auto epochs_of = [](testing::Cluster& cluster, const std::string& id) {
    std::map<int64_t, std::pair<double, double>> out;  // epoch -> test loss, accuracy
    for (const auto& e : arr(object_of(get(cluster.http_port(), "/v1/jobs/" + id + "/metrics")), "epochs")) {
      out[e.as_object().at("epoch").as_int64()] = {num(e.as_object(), "test_loss"), num(e.as_object(), "test_accuracy")};
    }
    return out;
  };
  std::map<int64_t, std::pair<double, double>> calm;
  {
    testing::Cluster cluster({.servers = 1, .workers = 1});
    const std::string id = submit(cluster, spec);
    wait_for_state(cluster, id, "SUCCEEDED", 120s);
    calm = epochs_of(cluster, id);
  }
  REQUIRE(calm.size() == 6);
  testing::Cluster cluster({.servers = 1, .workers = 1, .worker_flags = {"--slow-step-ms", "700"}});
  const std::string id = submit(cluster, spec);
  // Mid-step of epoch 3 (epochs 1 and 2 recorded).
  wait_for_job(cluster, id, "two epochs", [&](const json::object&) { return epochs_of(cluster, id).size() >= 2; }, 60s);
  std::this_thread::sleep_for(300ms);
  cluster.restart_coordinator(/*hard=*/true);
  const auto done = wait_for_state(cluster, id, "SUCCEEDED", 120s);
  const auto got = epochs_of(cluster, id);
  CHECK(got.size() == 6);
  for (const auto& [epoch, figures] : calm) {
    CAPTURE(epoch);
    REQUIRE(got.count(epoch) == 1);
    CHECK(got.at(epoch).first == figures.first);
    CHECK(got.at(epoch).second == figures.second);
  }
  CHECK(num(done, "test_accuracy") == calm.at(6).second);
}
