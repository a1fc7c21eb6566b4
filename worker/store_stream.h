// A worker's own examples, read from the dataset store (common/data/store_reader.h) rather than
// streamed by the coordinator (docs/DESIGN-NOTES.md "Dataset store (issue 50)"). The assignment
// names the training split's shards and their CRCs; a worker that sees the directory (one
// machine, a shared volume, NFS) and finds every shard's header as recorded reads there, and
// otherwise reads through the coordinator's openShard as before. Either way its batches are the
// same: the plan (common/data/data_plan.h) is computed here from the same spec and split size,
// and each batch carries the same bytes, labels and ids as DataService::fill_batch's.
//
// A stored table's rows come with the job's fitted preprocessing (the assignment's
// `preprocessing` and `table`): the worker applies it to the rows it reads, as the coordinator's
// preprocessed view does (StoredExamples over the rows), so the batches are the same bytes. A text
// split's documents come with the job's fitted tokenizer (`preprocessing` alone) and are tokenized
// as read, as the coordinator's tokenized view does. A table's text columns that the preprocessing
// tokenizes come as shards of cells beside the rows (`textColumns`): each row's cells are read
// and tokenized into its features.
//
// What it read goes to the coordinator's example ledger as digests (`served`), one call per
// next(); a call that fails is dropped (the coordinator may be down: the worker trains on, and a
// restarted coordinator clears the ledger anyway).
//
// Thread rules: the session's thread only (its event loop). The streams of one WorkerStore share
// its reader (single-owner, mutated by reads) on that thread.
// Ownership: WorkerStore owns the reader and the reports in flight; each stream shares the store.
#pragma once

#include <kj/async.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/data/data_plan.h"
#include "common/data/example_digest.h"
#include "common/data/preprocessing.h"
#include "common/data/store_reader.h"
#include "common/data/validation_split.h"
#include "common/rpc/proto/pstrain.capnp.h"

namespace pstrain {

class WorkerStore final : public std::enable_shared_from_this<WorkerStore>, private kj::TaskSet::ErrorHandler {
 public:
  // Who the reports are from and for.
  struct Reporter {
    proto::Coordinator::Client coordinator;
    uint32_t node_id = 0;
    std::string job_id;
    uint64_t generation = 0;
    bool sync = true;  // the ledger is a sync job's: async streams report nothing
  };

  // The store the assignment names, or null when there is none or this worker cannot read it
  // (`why_not` then says why: a missing directory, a shard not as recorded). `part`: the ids in
  // the store of the examples to read, in order (a hold-out's part); empty: all of them.
  static std::shared_ptr<WorkerStore> open(proto::StoredShards::Reader store, Reporter reporter, std::string* why_not,
                                           std::vector<uint32_t> part = {});
  // The parts of a hold-out store (holdOutFraction > 0) as the coordinator cut them
  // (validation_split.h), from the shards' labels; nullopt (and `why_not`) when they cannot be
  // read. Holds the labels while it cuts (4 bytes an example), then the parts' ids.
  static std::optional<HeldOutIds> held_out(proto::StoredShards::Reader store, std::string* why_not);

  // The training split's plan (a store read in training batches; not one read in blocks).
  void set_plan(const DataPlan& plan) { plan_.emplace(plan); }
  // The examples read from it: the part's, else the store's.
  uint64_t examples() const;

  // Worker `slice`'s training batches of `epoch` from `from_step`, as openShard's.
  proto::DataStream::Client open_train(uint32_t epoch, uint32_t slice, uint64_t from_step);
  // Slice `slice`'s contiguous block of `slices` of the split, in batches of `batch`, as
  // openShard's test streams (DataService::open_test).
  proto::DataStream::Client open_block(uint32_t slice, uint32_t slices, int64_t batch);

  const std::string& dir() const { return dir_; }

 private:
  friend class StoreStream;
  struct Preprocessing;
  WorkerStore(std::string dir, std::unique_ptr<StoreReader> reader, std::unique_ptr<Preprocessing> preprocessing,
              std::vector<uint32_t> part, Reporter reporter);
  // Fills `batch` with slice's examples `ids` of (epoch, step), as DataService::fill_batch.
  void fill(uint32_t epoch, int64_t step, const std::vector<uint32_t>& ids, proto::Batch::Builder batch);
  void taskFailed(kj::Exception&& e) override;
  void report(uint32_t epoch, uint32_t slice, uint64_t from_step, const std::vector<ExampleDigest>& digests);

  // A table's preprocessing, applied to the rows read, or a text split's tokenizer, applied to the
  // documents read (null: examples as stored).
  struct Preprocessing {
    FittedPreprocessing fitted;
    CategorySlots slots;  // the schema's category codes' slots and fingerprints
    // The cells of fitted.text_columns (same order), numbered as the rows.
    std::vector<std::unique_ptr<StoreReader>> texts;
    std::vector<float> features;               // scratch
    std::vector<uint8_t> document;             // scratch
  };

  std::string dir_;
  std::unique_ptr<StoreReader> reader_;
  std::unique_ptr<Preprocessing> preprocessing_;
  std::vector<uint32_t> part_;  // the ids in the store of the examples read (empty: all)
  std::optional<DataPlan> plan_;
  Reporter reporter_;
  uint32_t example_size_ = 0;  // values per example
  std::vector<uint64_t> ids_;  // scratch
  std::vector<uint8_t> bytes_;
  std::vector<int32_t> labels_;
  std::vector<float> targets_;
  kj::TaskSet reports_;  // last: destroyed first
};

}  // namespace pstrain
