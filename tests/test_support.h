// Helpers shared by the tests: temporary directories, the data directory, reference specs.
#pragma once

#include <kj/async.h>

#include <string>
#include <vector>

#include "common/data/job_spec.h"

namespace pstrain::testing {

// A fresh directory under the system temp dir, removed (with its contents) on destruction.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }
  std::string file(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

// The description of the exception a call (any KJ promise) failed with ("" if it succeeded).
template <typename Promise>
std::string failure_of(Promise&& promise, kj::WaitScope& ws) {
  try {
    promise.wait(ws);
  } catch (const kj::Exception& e) {
    return e.getDescription().cStr();
  }
  return "";
}

// $PSTRAIN_DATA_DIR if set, else the directory CMake found (../shared/data or ./data).
std::string data_dir();

// The MLP job of deploy/jobs/mnist-mlp.json with the given hidden sizes (784-h1-h2-10), Adam 1e-3,
// batch 128, seeds fixed.
JobSpec mlp_job(int hidden1, int hidden2, int epochs);
// mlp_job(700, 500, epochs) as JSON, in `mode` with that global batch, servers and workers.
std::string mlp_cluster_spec(TrainingMode mode, int64_t batch, int64_t epochs, int64_t servers, int64_t workers);

// Dense layers of `units` each, in order, on a flat input of `inputs` features (no activations,
// seed 1): a model for tests of where parameters go, not of training.
ModelSpec dense_stack(int inputs, const std::vector<int>& units);

// The Fashion-MNIST CNN of the custom-training tutorial, Adam, batch 64.
JobSpec fashion_cnn_job(int epochs);

}  // namespace pstrain::testing
