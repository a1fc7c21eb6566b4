// The coordinator's data service: loads datasets once and streams each worker its shard in
// record batches, so workers need no shared filesystem.
//
// A stream is a cursor over a planned sequence of batches (DataPlan for training, a contiguous
// block of the test split for evaluation). Flow control is the reader's: it asks for at most a
// few batches per call and keeps a bounded number of calls in flight.
//
// Thread rules: event-loop thread only.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>

#include "common/data_plan.h"
#include "common/dataset.h"
#include "common/proto/pstrain.capnp.h"

namespace pstrain {

class DataService {
 public:
  explicit DataService(std::string data_dir) : data_dir_(std::move(data_dir)) {}

  // Loads (once) and returns a split; throws DataError naming the file.
  std::shared_ptr<const Split> split(const std::string& dataset, SplitKind kind);

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
  std::string data_dir_;
  std::map<std::pair<std::string, int>, std::shared_ptr<const Split>> splits_;
};

}  // namespace pstrain
