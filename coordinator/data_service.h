// The coordinator's data service: loads datasets once and streams each worker its shard in
// record batches, so workers need no shared filesystem.
//
// A stream is a cursor over a planned sequence of batches (DataPlan for training, a contiguous
// block of the test split for evaluation). Flow control is the reader's: it asks for at most a
// few batches per call and keeps a bounded number of calls in flight.
//
// Datasets load on a thread of the service's own (TaskThread), never on the event loop: a job
// asks with load() and goes on when the split is there. Each split is loaded once and shared by
// every job that uses it; a load that failed is tried again by the next job that asks.
//
// Thread rules: event-loop thread only (the loading thread touches nothing but the files and the
// promise it fulfils).
#pragma once

#include <kj/async.h>

#include <functional>
#include <map>
#include <memory>
#include <string>

#include "common/data_plan.h"
#include "common/dataset.h"
#include "common/proto/pstrain.capnp.h"
#include "common/task_thread.h"

namespace pstrain {

class DataService {
 public:
  explicit DataService(std::string data_dir) : data_dir_(std::move(data_dir)) {}

  // The split, loaded once off the event loop; fails with the DataError's message naming the file.
  kj::Promise<std::shared_ptr<const Split>> load(const std::string& dataset, SplitKind kind);

  // Called for every training batch served: (step within the epoch, example indices).
  using Served = std::function<void(int64_t step, const std::vector<uint32_t>& indices)>;

  // A stream over worker `worker`'s batches of `epoch`, from `from_step`.
  proto::DataStream::Client open_train(std::shared_ptr<const Split> split, const DataPlan& plan, uint32_t epoch,
                                       uint32_t worker, int64_t from_step, Served served = {});
  // Worker `worker`'s contiguous block of the test split, in batches of `batch`.
  proto::DataStream::Client open_test(std::shared_ptr<const Split> split, uint32_t worker, uint32_t workers,
                                      int64_t batch);

  // Writes the examples `indices` of `split` into `batch`.
  static void fill_batch(const Split& split, uint32_t epoch, int64_t step, const std::vector<uint32_t>& indices,
                         proto::Batch::Builder batch);

  // Most batches a single next() call returns.
  static constexpr uint32_t kMaxBatchesPerCall = 8;

 private:
  struct Loading {
    kj::ForkedPromise<std::shared_ptr<const Split>> split;
    bool failed = false;  // set when the load failed: the next load() tries again
  };
  std::string data_dir_;
  std::map<std::pair<std::string, int>, std::unique_ptr<Loading>> splits_;
  TaskThread loader_;  // after splits_: destroyed first, so no load outlives what it reports to
};

}  // namespace pstrain
