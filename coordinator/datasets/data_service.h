// The coordinator's data service: loads datasets once, prepares each job's data (prepare(): the
// hold-out, class weights, a table's preprocessing), and streams each worker its shard in record
// batches, so workers need no shared filesystem. A split stored as shards is loaded as its labels
// (stored_examples.h): its examples are read from disk, on the service's reading thread, only
// for the workers that cannot read the store themselves.
//
// A stream is a cursor over a planned sequence of batches (DataPlan for training, a contiguous
// block of the test split for evaluation). Flow control is the reader's: it asks for at most a
// few batches per call and keeps a bounded number of calls in flight.
//
// Where splits come from is the owner's choice: a SplitLoader (dataset.h) given at construction,
// such as idx_split_loader(data dir) for the built-in IDX datasets, or a dataset catalog.
// Datasets load on a thread of the service's own (TaskThread), never on the event loop: a job
// asks with load() and goes on when the split is there. Each split is loaded once and shared by
// every job that uses it (as an immutable shared_ptr); a load that failed is tried again by the
// next job that asks, and forget() drops a dataset's splits so that the next load() reads it again.
//
// Thread rules: event-loop thread only, except the loader, which runs on the loading thread (it
// must be thread-safe, and touch nothing of the service: it returns the split or throws). The
// loading thread otherwise touches only the promise it fulfils; the reading thread only the
// split it reads (thread-safe) and the reply's buffers, handed back through a promise.
// Ownership: owns the loader, the cached splits (shared with the jobs that hold them) and the
// loading thread.
#pragma once

#include <kj/async.h>

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/data/class_weight.h"
#include "common/data/data_plan.h"
#include "common/data/dataset.h"
#include "common/data/table_split.h"
#include "common/data/validation_split.h"
#include "common/rpc/proto/pstrain.capnp.h"
#include "common/base/task_thread.h"

namespace pstrain {

// What a job's data is made of (DataService::prepare()), taken from its spec at the coordinator:
// the data service reads no job spec.
struct DataRecipe {
  std::string dataset;
  double validation_fraction = 0;   // training.validation_fraction: held out of train (0: none)
  uint64_t seed = 0;                // dataset.shuffle_seed: the hold-out's draw
  ClassWeightSpec class_weight;     // training.class_weight, resolved on the training part
  LossSpec loss;                    // the loss the weights are for
  PreprocessingSpec preprocessing;  // a table's
};

// A job's data, ready to train on: the splits it trains, validates (null without a hold-out) and
// tests on, a table's fitted preprocessing (train, validation and test are then its features;
// null for other datasets), and the class weights resolved on the training examples (before a
// table's preprocessing: its class names) when the recipe asks for weights. The splits share
// ownership of what they alias (a hold-out, a prepared table).
struct JobData {
  std::shared_ptr<const Split> train, validation, test;
  std::shared_ptr<const FittedPreprocessing> preprocessing;
  std::optional<std::vector<float>> class_weights;
};

class DataService {
 public:
  // The files' version of a dataset (thread-safe; called on the event loop): a cached split of an
  // older version is loaded again, so a replaced dataset is never served from its old files.
  using Generation = std::function<uint64_t(const std::string& dataset)>;

  explicit DataService(SplitLoader loader, Generation generation = {})
      : loader_(std::move(loader)), generation_(std::move(generation)) {}

  // The split, loaded once off the event loop; fails with the loader's exception message (a
  // DataError names the dataset or file).
  kj::Promise<std::shared_ptr<const Split>> load(const std::string& dataset, SplitKind kind);

  // Everything a job's data needs before it trains, as one call (DESIGN-NOTES "Coordinator"):
  // both splits loaded (cached, off the loop), the validation hold-out cut, the class weights
  // resolved on the training part, a table's preprocessing fitted on it and applied to each
  // split. Fails with a message naming the dataset and what did not fit.
  kj::Promise<std::shared_ptr<const JobData>> prepare(DataRecipe recipe);

  // Drops the cached splits of `dataset` (replaced or deleted): the next load() calls the loader
  // again. Jobs holding a split keep theirs; a load in flight still answers its callers but is
  // not cached.
  void forget(const std::string& dataset);

  // Called for every training batch served: (step within the epoch, example indices).
  using Served = std::function<void(int64_t step, const std::vector<uint32_t>& indices)>;

  // A stream over worker `worker`'s batches of `epoch`, from `from_step`.
  proto::DataStream::Client open_train(std::shared_ptr<const Split> split, const DataPlan& plan, uint32_t epoch,
                                       uint32_t worker, int64_t from_step, Served served = {});
  // Worker `worker`'s contiguous block of the test split, in batches of `batch`.
  proto::DataStream::Client open_test(std::shared_ptr<const Split> split, uint32_t worker, uint32_t workers,
                                      int64_t batch);

  // Writes the examples `indices` of `split` into `batch`, as stored (dtype and bytes) with their
  // int32 labels. Reads a stored split's examples from disk (the caller's thread: not an event
  // loop's).
  static void fill_batch(const Split& split, uint32_t epoch, int64_t step, const std::vector<uint32_t>& indices,
                         proto::Batch::Builder batch);
  // The same with the examples' bytes read already (`bytes`: indices.size() x example_bytes;
  // null: read them from the split).
  static void fill_batch(const Split& split, uint32_t epoch, int64_t step, const std::vector<uint32_t>& indices,
                         const uint8_t* bytes, proto::Batch::Builder batch);

  // Most batches a single next() call returns.
  static constexpr uint32_t kMaxBatchesPerCall = 8;

 private:
  // A job's validation hold-out of `train` (common/data/validation_split.h), cut on the loading
  // thread (not cached: each job that asks gets its own); fails with the DataError's message.
  kj::Promise<std::shared_ptr<const HeldOut>> hold_out(std::shared_ptr<const Split> train, double fraction,
                                                       uint64_t seed);

  // A job's table splits preprocessed (common/data/table_split.h): the preprocessing fitted on
  // `train` (the training part) and applied to each, on the loading thread (not cached: each job
  // has its own); fails with the error's message (a bad spec or a defect names it).
  kj::Promise<std::shared_ptr<const PreparedTable>> prepare_table(PreprocessingSpec spec, std::shared_ptr<const Split> train,
                                                                 std::shared_ptr<const Split> validation,
                                                                 std::shared_ptr<const Split> test);

  using Key = std::pair<std::string, int>;  // dataset, SplitKind
  struct Loading {
    kj::ForkedPromise<std::shared_ptr<const Split>> split;
    uint64_t id = 0;      // tells this load from a later one of the same key
    uint64_t generation = 0;  // of the dataset's files when it started
    bool failed = false;  // set when the load failed: the next load() tries again
  };
  const SplitLoader loader_;  // called on loading_ only
  const Generation generation_;
  std::map<Key, std::unique_ptr<Loading>> splits_;
  uint64_t next_id_ = 0;
  // Reads stored splits' examples for the streams (shared with them: a stream may outlive the
  // service at shutdown).
  std::shared_ptr<TaskThread> reading_ = std::make_shared<TaskThread>();
  TaskThread loading_;  // after splits_: destroyed first, so no load outlives what it reports to
};

}  // namespace pstrain
