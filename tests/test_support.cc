#include "tests/test_support.h"

#include <cstdlib>
#include <filesystem>
#include <stdexcept>

namespace pstrain::testing {

TempDir::TempDir() {
  std::string pattern = (std::filesystem::temp_directory_path() / "pstrain-test-XXXXXX").string();
  if (mkdtemp(pattern.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
  path_ = pattern;
}

TempDir::~TempDir() {
  std::error_code ignored;
  std::filesystem::remove_all(path_, ignored);
}

std::string data_dir() {
  if (const char* dir = std::getenv("PSTRAIN_DATA_DIR"); dir != nullptr && *dir != '\0') return dir;
  return PSTRAIN_TEST_DATA_DIR;
}

ModelSpec dense_stack(int inputs, const std::vector<int>& units) {
  ModelSpec model;
  model.input_shape = {inputs};
  model.seed = 1;
  for (int n : units) {
    LayerSpec dense;
    dense.type = LayerType::kDense;
    dense.units = n;
    model.layers.push_back(dense);
  }
  return model;
}

JobSpec mlp_job(int hidden1, int hidden2, int epochs) {
  return parse_job_spec(R"({
    "name": "mnist-mlp",
    "dataset": {"name": "mnist10k", "shard_policy": "DATA", "shuffle_seed": 22},
    "model": {"input_shape": [28, 28, 1], "seed": 22, "layers": [
      {"type": "flatten"},
      {"type": "dense", "units": )" + std::to_string(hidden1) + R"(, "activation": "relu"},
      {"type": "dense", "units": )" + std::to_string(hidden2) + R"(, "activation": "relu"},
      {"type": "dense", "units": 10}
    ]},
    "optimizer": {"type": "adam", "learning_rate": 0.001, "epsilon": 1e-7},
    "training": {"mode": "sync", "global_batch_size": 128, "epochs": )" + std::to_string(epochs) + R"(}
  })");
}

std::string mlp_cluster_spec(TrainingMode mode, int64_t batch, int64_t epochs, int64_t servers, int64_t workers) {
  JobSpec spec = mlp_job(700, 500, static_cast<int>(epochs));
  spec.training.mode = mode;
  spec.training.global_batch_size = batch;
  spec.training.servers = servers;
  spec.training.workers = workers;
  return job_spec_to_json(spec);
}

JobSpec fashion_cnn_job(int epochs) {
  return parse_job_spec(R"({
    "name": "fashion-cnn",
    "dataset": {"name": "fashion", "shuffle_seed": 1},
    "model": {"input_shape": [28, 28, 1], "seed": 1, "layers": [
      {"type": "conv2d", "filters": 32, "kernel_size": 3, "activation": "relu"},
      {"type": "maxpool2d"},
      {"type": "conv2d", "filters": 64, "kernel_size": 3, "activation": "relu"},
      {"type": "maxpool2d"},
      {"type": "flatten"},
      {"type": "dense", "units": 64, "activation": "relu"},
      {"type": "dense", "units": 10}
    ]},
    "optimizer": {"type": "adam"},
    "training": {"global_batch_size": 64, "epochs": )" + std::to_string(epochs) + R"(}
  })");
}

}  // namespace pstrain::testing
