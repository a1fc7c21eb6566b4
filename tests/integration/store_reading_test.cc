// Workers reading their own examples from the dataset store (worker/store_stream.h): a dataset
// dropped in the data directory as several shards, trained by a real cluster whose workers read
// the shards themselves, equals the standalone trainer with as many slices bit for bit, equals the
// same cluster reading through the coordinator, uses every example once per epoch (the
// coordinator's ledger, fed by the workers' digests), and stays exact through kill -9 of a worker
// and of the coordinator.
#include <doctest/doctest.h>

#include <filesystem>
#include <random>
#include <regex>
#include <string>
#include <vector>

#include "common/data/dataset.h"
#include "common/data/dataset_manifest.h"
#include "common/data/job_spec.h"
#include "common/data/shard_sink.h"
#include "common/data/validation_split.h"
#include "tests/integration/cluster.h"
#include "tests/integration/recovery_support.h"
#include "tests/test_support.h"
#include "worker/local_trainer.h"

using namespace pstrain;
using namespace std::chrono_literals;

namespace {

constexpr int kFeatures = 12, kClasses = 3, kTrain = 2600, kTest = 400;
constexpr uint64_t kShardExamples = 700;  // 4 training shards, the last one short

// `n` examples of Gaussian blobs (float32, kFeatures) written as shards of `split` in `dir`; with
// `regression`, each example's target is 2 floats (a linear function of its features, and its
// class) instead of a label.
std::vector<std::string> write_split(const std::string& dir, const std::string& split, int n, uint32_t seed,
                                     bool regression = false) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::mt19937 centre_rng(11);
  std::vector<float> centres(kClasses * kFeatures);
  for (auto& c : centres) c = 1.5f * normal(centre_rng);
  std::vector<float> x;
  std::vector<int32_t> y;
  for (int i = 0; i < n; ++i) {
    const int label = static_cast<int>(rng() % kClasses);
    y.push_back(label);
    for (int j = 0; j < kFeatures; ++j) x.push_back(centres[static_cast<size_t>(label * kFeatures + j)] + normal(rng));
  }
  ShardSink sink(dir, split, ShardLimits{.max_examples = kShardExamples});
  sink.begin({kFeatures}, Dtype::kFloat32);
  sink.examples(reinterpret_cast<const uint8_t*>(x.data()), x.size() * sizeof(float));
  std::vector<float> targets;
  for (int i = 0; i < n; ++i) {
    float sum = 0;
    for (int j = 0; j < kFeatures; ++j) sum += static_cast<float>(j % 3 - 1) * x[static_cast<size_t>(i * kFeatures + j)];
    targets.push_back(0.25f * sum);
    targets.push_back(static_cast<float>(y[static_cast<size_t>(i)]));
  }
  if (regression) {
    sink.targets(targets.data(), targets.size());
  } else {
    sink.labels(y.data(), y.size());
  }
  std::vector<std::string> files;
  for (const ShardInfo& s : sink.finish(regression ? 2 : 0)) files.push_back(s.file);
  return files;
}

// The dataset "spots" in `data_dir` (or "spots-values", with 2 regression targets an example), as a
// directory of shards with its manifest.
void write_dataset(const std::string& data_dir, bool regression = false) {
  const std::string dir = data_dir + (regression ? "/spots-values" : "/spots");
  std::filesystem::create_directories(dir);
  DatasetManifest manifest;
  for (const auto& [split, n, seed] : {std::tuple{"train", kTrain, 1u}, std::tuple{"test", kTest, 2u}}) {
    ManifestSplit s;
    s.format = ManifestSplit::Format::kShards;
    s.shards = write_split(dir, split, n, seed, regression);
    s.shape = {kFeatures};
    s.dtype = Dtype::kFloat32;
    manifest.splits[split] = s;
  }
  if (!regression) manifest.num_classes = kClasses;
  write_manifest(dir, manifest);
}

DatasetInfo spots_info() {
  DatasetInfo info;
  info.name = "spots";
  info.num_classes = kClasses;
  info.example_shape = {kFeatures};
  return info;
}

// A shuffle window of 500 examples, less than the split's 2,600: the epochs' orders are windowed
// (blocks of 2 ids in a seeded permutation through the window), as a split larger than the
// default window's 2^20 examples is.
JobSpec spots_job(int workers, int epochs) {
  JobSpec spec = parse_job_spec(R"({"name": "spots", "dataset": {"name": "spots", "shuffle_seed": 3, "shuffle_window": 500},
    "model": {"input_shape": [12], "seed": 5, "layers": [{"type": "dense", "units": 16, "activation": "relu"},
                                                           {"type": "dense", "units": 3}]},
    "optimizer": {"type": "sgd", "learning_rate": 0.1},
    "training": {"global_batch_size": 60, "epochs": 1, "workers": 2, "servers": 2}})",
                                {spots_info()});
  spec.training.workers = workers;
  spec.training.epochs = epochs;
  spec.backup.frequency = BackupSpec::Frequency::kSteps;
  spec.backup.steps = 10;
  return spec;
}

std::vector<float> trainer_params(const JobSpec& spec, const std::string& data_dir) {
  LocalTrainerOptions options;
  options.data_dir = data_dir;
  options.replicas = spec.training.workers;
  options.servers = static_cast<uint32_t>(spec.training.servers);
  const TrainingResult r = train_locally(spec, options);
  return {r.params.begin(), r.params.end()};
}

// Runs `spec` on a cluster over `data_dir`; `fault` runs once the job is under way. Returns the
// coordinator's log and the final parameters.
struct Run {
  std::string coordinator_log, worker_log;
  std::vector<float> params;
};
template <typename Fault>
Run run_cluster(const JobSpec& spec, const std::string& data_dir, const std::vector<std::string>& worker_flags,
                Fault fault) {
  testing::TempDir dir;
  testing::Cluster cluster({.job_file = testing::write_spec(dir.path(), "job.json", job_spec_to_json(spec)),
                            .save_params = dir.file("final.bin"),
                            .workers = spec.training.workers,
                            .coordinator_flags = {"--data-dir", data_dir, "--dead-after-ms", "1500"},
                            .worker_flags = worker_flags});
  fault(cluster);
  REQUIRE(cluster.wait_job(180s) == 0);
  Run run{cluster.coordinator().log_text(), cluster.workers()[0]->log_text(), testing::read_floats(dir.file("final.bin"))};
  return run;
}

void check_every_example_once(const std::string& log, int epochs, int examples = kTrain) {
  for (int epoch = 1; epoch <= epochs; ++epoch) {
    INFO("epoch " << epoch);
    CHECK(log.find("examples of epoch " + std::to_string(epoch) + ": " + std::to_string(examples) +
                   " used once, 0 missing, 0 used more than once") != std::string::npos);
  }
}

// The validation figures of a log's epoch lines (" | val loss L accuracy A"), in order.
std::vector<std::string> validation_lines(const std::string& log) {
  std::vector<std::string> out;
  const std::regex val(" \\| val loss [0-9.]+ accuracy [0-9.]+");
  for (auto it = std::sregex_iterator(log.begin(), log.end(), val); it != std::sregex_iterator(); ++it) out.push_back(it->str());
  return out;
}

const auto kNoFault = [](testing::Cluster&) {};

}  // namespace

TEST_CASE("store reading - workers read a sharded dataset themselves: the N-slice trainer, the coordinator's stream, every example once") {
  testing::TempDir data;
  write_dataset(data.path());
  const JobSpec spec = spots_job(2, 2);
  const Run local = run_cluster(spec, data.path(), {}, kNoFault);
  CHECK(local.worker_log.find("reads its training examples from the dataset store at") != std::string::npos);
  CHECK(local.worker_log.find(", and its test examples") != std::string::npos);
  // The coordinator is out of the training data's path: it streamed no example.
  CHECK(local.coordinator_log.find("training examples served: 0 streamed by the coordinator, ") != std::string::npos);
  // The test accuracy the coordinator printed is the one of the test split the workers read.
  CHECK(local.coordinator_log.find("final test accuracy: ") != std::string::npos);
  check_every_example_once(local.coordinator_log, 2);
  CHECK(testing::max_difference(local.params, trainer_params(spec, data.path())) == 0);
  // The same job with the workers told to read through the coordinator: the same parameters.
  const Run streamed = run_cluster(spec, data.path(), {"--data-from", "coordinator"}, kNoFault);
  CHECK(streamed.worker_log.find("reads its training examples from the dataset store") == std::string::npos);
  check_every_example_once(streamed.coordinator_log, 2);
  CHECK(streamed.coordinator_log.find("training examples served: 0 streamed") == std::string::npos);
  CHECK(streamed.coordinator_log.find(" streamed by the coordinator, 0 read by workers") != std::string::npos);
  CHECK(testing::max_difference(local.params, streamed.params) == 0);
  const auto accuracy = [](const std::string& log) { return log.substr(log.find("final test accuracy: "), 30); };
  CHECK(accuracy(local.coordinator_log) == accuracy(streamed.coordinator_log));
}

TEST_CASE("store reading - 1, 3 and 4 workers on a sharded dataset equal the trainer with as many slices") {
  testing::TempDir data;
  write_dataset(data.path());
  for (int workers : {1, 3, 4}) {
    INFO(workers << " worker(s)");
    const JobSpec spec = spots_job(workers, 1);
    const Run run = run_cluster(spec, data.path(), {}, kNoFault);
    check_every_example_once(run.coordinator_log, 1);
    CHECK(testing::max_difference(run.params, trainer_params(spec, data.path())) == 0);
  }
}

TEST_CASE("store reading - kill -9 of a worker mid-epoch: the job ends with the trainer's parameters, every example once") {
  testing::TempDir data;
  write_dataset(data.path());
  const JobSpec spec = spots_job(3, 3);
  const Run run = run_cluster(spec, data.path(), {}, [](testing::Cluster& cluster) {
    cluster.coordinator().wait_for_line("backup at step 20 complete", 60s);
    cluster.workers()[2]->kill_hard();
  });
  CHECK(run.coordinator_log.find("with 2 worker(s)") != std::string::npos);
  check_every_example_once(run.coordinator_log, 3);
  CHECK(testing::max_difference(run.params, trainer_params(spec, data.path())) == 0);
}

TEST_CASE("store reading - kill -9 of the coordinator mid-epoch: the job ends with the trainer's parameters") {
  testing::TempDir data;
  write_dataset(data.path());
  const JobSpec spec = spots_job(2, 3);
  const Run run = run_cluster(spec, data.path(), {}, [](testing::Cluster& cluster) {
    cluster.coordinator().wait_for_line("backup at step 30 complete", 60s);
    cluster.restart_coordinator(/*hard=*/true);
  });
  CHECK(std::regex_search(run.coordinator_log, std::regex("took over the servers' state at step [0-9]+")));
  CHECK(testing::max_difference(run.params, trainer_params(spec, data.path())) == 0);
}

TEST_CASE("store reading - kill -9 of a server mid-epoch then a restart: the trainer's parameters, every example once after the rollback") {
  testing::TempDir data;
  write_dataset(data.path());
  const JobSpec spec = spots_job(2, 3);
  const Run run = run_cluster(spec, data.path(), {}, [](testing::Cluster& cluster) {
    cluster.coordinator().wait_for_line("backup at step 50 complete", 60s);  // in epoch 2 (44 steps an epoch)
    cluster.stop_server(1, /*hard=*/true);
    cluster.start_server(1);
  });
  CHECK(std::regex_search(run.coordinator_log, std::regex("step\\(s\\) to replay|rolled back|restor")));
  // The rollback forgot the replayed steps' records and the replay wrote them again.
  check_every_example_once(run.coordinator_log, 3);
  CHECK(testing::max_difference(run.params, trainer_params(spec, data.path())) == 0);
}

TEST_CASE("store reading - a regression dataset's targets are read by the workers as the coordinator streams them") {
  testing::TempDir data;
  write_dataset(data.path(), /*regression=*/true);
  DatasetInfo info;
  info.name = "spots-values";
  info.example_shape = {kFeatures};
  info.target_width = 2;
  JobSpec spec = parse_job_spec(R"({"name": "values", "dataset": {"name": "spots-values", "shuffle_seed": 4},
    "model": {"input_shape": [12], "seed": 6, "layers": [{"type": "dense", "units": 16, "activation": "relu"},
                                                           {"type": "dense", "units": 2}]},
    "loss": "mean_squared_error", "optimizer": {"type": "sgd", "learning_rate": 0.01},
    "training": {"global_batch_size": 60, "epochs": 2, "workers": 2, "servers": 2}})",
                                {info});
  const Run local = run_cluster(spec, data.path(), {}, kNoFault);
  CHECK(local.worker_log.find("reads its training examples from the dataset store at") != std::string::npos);
  CHECK(local.coordinator_log.find("training examples served: 0 streamed by the coordinator, ") != std::string::npos);
  const Run streamed = run_cluster(spec, data.path(), {"--data-from", "coordinator"}, kNoFault);
  CHECK(testing::max_difference(local.params, streamed.params) == 0);
  CHECK(testing::max_difference(local.params, trainer_params(spec, data.path())) == 0);
}

TEST_CASE("store reading - a validation hold-out: workers cut both parts from the shards and read them, as the coordinator streams them") {
  testing::TempDir data;
  write_dataset(data.path());
  JobSpec spec = spots_job(2, 2);
  spec.training.validation_fraction = 0.2;  // about 520 of the 2,600 held out (by class, seeded)
  const Split all = load_directory_split(data.path() + "/spots", "spots", SplitKind::kTrain);
  const HeldOutIds parts = held_out_ids(all, 0.2, spec.dataset.shuffle_seed);
  const int trained = static_cast<int>(parts.train.size());
  const Run local = run_cluster(spec, data.path(), {}, kNoFault);
  CHECK(local.worker_log.find("from the dataset store at") != std::string::npos);
  CHECK(local.worker_log.find(", its validation examples, and its test examples") != std::string::npos);
  CHECK(local.coordinator_log.find("training examples served: 0 streamed by the coordinator, ") != std::string::npos);
  check_every_example_once(local.coordinator_log, 2, trained);
  const Run streamed = run_cluster(spec, data.path(), {"--data-from", "coordinator"}, kNoFault);
  CHECK(streamed.coordinator_log.find(" streamed by the coordinator, 0 read by workers") != std::string::npos);
  CHECK(testing::max_difference(local.params, streamed.params) == 0);
  CHECK(testing::max_difference(local.params, trainer_params(spec, data.path())) == 0);
  // The same validation figures every epoch: the same examples, read by the workers.
  const std::vector<std::string> val = validation_lines(local.coordinator_log);
  CHECK(val.size() == 2);
  CHECK(val == validation_lines(streamed.coordinator_log));
}
