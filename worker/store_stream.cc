#include "worker/store_stream.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <functional>

#include "common/base/error.h"
#include "common/base/log.h"
#include "common/data/stored_examples.h"
#include "common/data/tokenizer.h"
#include "common/rpc/rpc_util.h"

namespace pstrain {

// A stream of batches read from the store: batch `step` is the examples batch_at(step).
class StoreStream final : public proto::DataStream::Server {
 public:
  StoreStream(std::shared_ptr<WorkerStore> store, uint32_t epoch, uint32_t slice, int64_t from_step, int64_t steps,
              std::function<std::vector<uint32_t>(int64_t)> batch_at, bool report)
      : store_(std::move(store)),
        batch_at_(std::move(batch_at)),
        epoch_(epoch),
        slice_(slice),
        step_(from_step),
        steps_(steps),
        report_(report) {}

 protected:
  kj::Promise<void> next(NextContext context) override {
    // At most 8 batches a call, as the coordinator's streams (DataService::kMaxBatchesPerCall).
    const uint32_t wanted = std::clamp<uint32_t>(context.getParams().getMaxBatches(), 1, 8);
    const auto count = static_cast<uint32_t>(std::clamp<int64_t>(steps_ - step_, 0, wanted));
    auto results = context.getResults();
    auto batches = results.initBatches(count);
    std::vector<ExampleDigest> digests;
    const auto first = static_cast<uint64_t>(step_);
    for (uint32_t b = 0; b < count; ++b, ++step_) {
      const std::vector<uint32_t> ids = batch_at_(step_);
      store_->fill(epoch_, step_, ids, batches[b]);
      digests.push_back(digest_of(ids));
    }
    results.setEnd(step_ >= steps_);
    if (report_ && !digests.empty()) store_->report(epoch_, slice_, first, digests);
    return kj::READY_NOW;
  }

 private:
  std::shared_ptr<WorkerStore> store_;
  std::function<std::vector<uint32_t>(int64_t)> batch_at_;
  uint32_t epoch_, slice_;
  int64_t step_, steps_;
  bool report_;  // to the ledger (training batches)
};

std::shared_ptr<WorkerStore> WorkerStore::open(proto::StoredShards::Reader store, Reporter reporter,
                                               std::string* why_not, std::vector<uint32_t> part) {
  const std::string dir = rpc::to_string(store.getDir());
  if (dir.empty()) {
    *why_not = "the coordinator streams this split (it is not stored as shards as loaded)";
    return nullptr;
  }
  std::error_code error;
  if (!std::filesystem::is_directory(dir, error)) {
    *why_not = "this worker does not see the dataset store at " + dir;
    return nullptr;
  }
  std::vector<std::string> files;
  for (auto f : store.getFiles()) files.push_back(rpc::to_string(f));
  std::vector<uint32_t> crcs;
  for (uint32_t crc : store.getCrcs()) crcs.push_back(crc);
  try {
    auto reader = std::make_unique<StoreReader>(dir, std::move(files), 0, std::move(crcs));
    if (reader->size() != store.getExamples()) {
      *why_not = dir + " holds " + std::to_string(reader->size()) + " examples, the coordinator's split " +
                 std::to_string(store.getExamples());
      return nullptr;
    }
    std::unique_ptr<Preprocessing> preprocessing;
    if (store.getPreprocessing().size() > 0 && store.getTable().size() == 0) {  // documents, tokenized as read
      preprocessing = std::make_unique<Preprocessing>();
      preprocessing->fitted = fitted_from_json(rpc::to_string(store.getPreprocessing()));
      if (!preprocessing->fitted.text || !reader->layout().variable) {
        *why_not = dir + ": the assignment's preprocessing is not a tokenizer of documents";
        return nullptr;
      }
    } else if (reader->layout().variable) {
      *why_not = dir + ": examples of varying size without a tokenizer are not read by workers";
      return nullptr;
    }
    if (reader->layout().labels == LabelKind::kNone) {
      *why_not = dir + ": examples without labels are not read by workers";
      return nullptr;
    }
    if (!preprocessing && store.getPreprocessing().size() > 0) {
      const TableSchema table = table_from_json(rpc::to_string(store.getTable()), "the assignment's table");
      preprocessing = std::make_unique<Preprocessing>();
      preprocessing->fitted = fitted_from_json(rpc::to_string(store.getPreprocessing()));
      preprocessing->slots = category_slots(preprocessing->fitted, table);
      for (const FittedTextColumn& t : preprocessing->fitted.text_columns) {
        std::unique_ptr<StoreReader> cells;
        for (auto column : store.getTextColumns()) {
          if (rpc::to_string(column.getColumn()) != t.name) continue;
          std::vector<std::string> names;
          for (auto f : column.getFiles()) names.push_back(rpc::to_string(f));
          std::vector<uint32_t> sums;
          for (uint32_t crc : column.getCrcs()) sums.push_back(crc);
          cells = std::make_unique<StoreReader>(dir, std::move(names), 8, std::move(sums));
        }
        if (!cells || !cells->layout().variable || cells->size() != reader->size()) {
          *why_not = dir + ": text column '" + t.name + "' has no cells, one per row, in the assignment";
          return nullptr;
        }
        preprocessing->texts.push_back(std::move(cells));
      }
      if (reader->layout().dtype != Dtype::kFloat32 ||
          reader->layout().example_bytes != table.row_width() * sizeof(float)) {
        *why_not = dir + ": its rows do not hold the table's " + std::to_string(table.row_width()) + " stored values";
        return nullptr;
      }
    }
    if (!part.empty() && part.back() >= reader->size()) {
      *why_not = dir + ": the hold-out's part reaches past its " + std::to_string(reader->size()) + " examples";
      return nullptr;
    }
    return std::shared_ptr<WorkerStore>(
        new WorkerStore(dir, std::move(reader), std::move(preprocessing), std::move(part), std::move(reporter)));
  } catch (const DataError& e) {
    *why_not = e.what();
    return nullptr;
  }
}

std::optional<HeldOutIds> WorkerStore::held_out(proto::StoredShards::Reader store, std::string* why_not) {
  const std::string dir = rpc::to_string(store.getDir());
  std::vector<std::string> files;
  for (auto f : store.getFiles()) files.push_back(rpc::to_string(f));
  try {
    // The labels alone (load_stored_split reads no example): the strata the coordinator cut by.
    const StoreReader reader(dir, files, 1);
    const ShardLayout& layout = reader.layout();
    const std::vector<uint32_t> shape =
        layout.variable ? std::vector<uint32_t>{} : std::vector<uint32_t>{static_cast<uint32_t>(layout.example_bytes / dtype_size(layout.dtype))};
    const Split labels = load_stored_split(dir, files, shape, layout.dtype, "the hold-out's split", SplitKind::kTrain);
    if (labels.size != store.getExamples()) {
      *why_not = dir + " holds " + std::to_string(labels.size) + " examples, the coordinator's split " +
                 std::to_string(store.getExamples());
      return std::nullopt;
    }
    return held_out_ids(labels, store.getHoldOutFraction(), store.getHoldOutSeed());
  } catch (const DataError& e) {
    *why_not = e.what();
    return std::nullopt;
  }
}

uint64_t WorkerStore::examples() const { return part_.empty() ? reader_->size() : part_.size(); }

WorkerStore::WorkerStore(std::string dir, std::unique_ptr<StoreReader> reader, std::unique_ptr<Preprocessing> preprocessing,
                         std::vector<uint32_t> part, Reporter reporter)
    : dir_(std::move(dir)),
      reader_(std::move(reader)),
      preprocessing_(std::move(preprocessing)),
      part_(std::move(part)),
      reporter_(std::move(reporter)),
      example_size_(preprocessing_ ? preprocessing_->fitted.width()
                                   : static_cast<uint32_t>(reader_->layout().example_bytes / dtype_size(reader_->layout().dtype))),
      reports_(*this) {}

proto::DataStream::Client WorkerStore::open_train(uint32_t epoch, uint32_t slice, uint64_t from_step) {
  KJ_REQUIRE(plan_.has_value(), "a training stream of a store without a plan", dir_);
  auto shard = std::make_shared<DataPlan::EpochShard>(plan_->shard(epoch, slice));
  const int64_t steps = shard->steps();
  return kj::heap<StoreStream>(shared_from_this(), epoch, slice, static_cast<int64_t>(from_step), steps,
                               [shard](int64_t step) { return shard->batch(step); }, true);
}

proto::DataStream::Client WorkerStore::open_block(uint32_t slice, uint32_t slices, int64_t batch) {
  const EvaluationBlock block = EvaluationBlock::of(examples(), slice, slices, batch);
  return kj::heap<StoreStream>(shared_from_this(), 0, slice, 0, block.steps(),
                               [block](int64_t step) { return block.examples(step); }, false);
}

void WorkerStore::fill(uint32_t epoch, int64_t step, const std::vector<uint32_t>& ids, proto::Batch::Builder batch) {
  ids_.resize(ids.size());
  for (size_t i = 0; i < ids.size(); ++i) ids_[i] = part_.empty() ? ids[i] : part_[ids[i]];
  if (preprocessing_ && preprocessing_->fitted.text) {  // documents, tokenized one by one
    Preprocessing& p = *preprocessing_;
    const FittedTokenizer& tokenizer = *p.fitted.text;
    p.features.resize(ids.size() * size_t{example_size_});
    labels_.resize(ids.size());
    targets_.clear();
    for (size_t i = 0; i < ids_.size(); ++i) {
      reader_->read(ids_[i], p.document);
      labels_[i] = reader_->label(ids_[i]);
      tokenizer.apply(std::string_view(reinterpret_cast<const char*>(p.document.data()), p.document.size()),
                      p.features.data() + i * example_size_);
    }
    bytes_.resize(p.features.size() * sizeof(float));
    std::memcpy(bytes_.data(), p.features.data(), bytes_.size());
  } else {
    reader_->read_batch(ids_, bytes_, labels_, targets_);
  }
  if (preprocessing_ && !preprocessing_->fitted.text) {  // a table's rows: the job's features, as the coordinator's view makes them
    Preprocessing& p = *preprocessing_;
    const size_t rows = ids.size();
    std::vector<float> values(bytes_.size() / sizeof(float));
    std::memcpy(values.data(), bytes_.data(), bytes_.size());
    p.features.resize(rows * p.fitted.width());
    apply_preprocessing(p.fitted, p.slots, values, rows, p.features.data());
    for (size_t k = 0; k < p.texts.size(); ++k) {
      for (size_t i = 0; i < rows; ++i) {
        p.texts[k]->read(ids_[i], p.document);
        apply_text_cell(p.fitted, k, std::string_view(reinterpret_cast<const char*>(p.document.data()), p.document.size()),
                        p.features.data() + i * p.fitted.width());
      }
    }
    bytes_.resize(p.features.size() * sizeof(float));
    std::memcpy(bytes_.data(), p.features.data(), bytes_.size());
  }
  batch.setEpoch(epoch);
  batch.setStep(static_cast<uint64_t>(step));
  batch.setSize(static_cast<uint32_t>(ids.size()));
  batch.setExampleSize(example_size_);
  batch.setDtype(rpc::to_wire(preprocessing_ ? Dtype::kFloat32 : reader_->layout().dtype));
  auto examples = batch.initExamples(bytes_.size());
  if (!bytes_.empty()) std::memcpy(examples.begin(), bytes_.data(), bytes_.size());
  auto list = batch.initIndices(static_cast<unsigned>(ids.size()));
  for (size_t i = 0; i < ids.size(); ++i) list.set(static_cast<unsigned>(i), ids[i]);
  if (reader_->layout().labels == LabelKind::kTargets) {
    auto targets = batch.initTargets(static_cast<unsigned>(targets_.size()));
    for (size_t i = 0; i < targets_.size(); ++i) targets.set(static_cast<unsigned>(i), targets_[i]);
  } else {
    auto labels = batch.initLabels(static_cast<unsigned>(labels_.size()));
    for (size_t i = 0; i < labels_.size(); ++i) labels.set(static_cast<unsigned>(i), labels_[i]);
  }
}

void WorkerStore::report(uint32_t epoch, uint32_t slice, uint64_t from_step, const std::vector<ExampleDigest>& digests) {
  if (!reporter_.sync) return;
  auto request = reporter_.coordinator.servedRequest();
  request.setNodeId(reporter_.node_id);
  request.setJobId(reporter_.job_id);
  request.setGeneration(reporter_.generation);
  request.setEpoch(epoch);
  request.setSlice(slice);
  request.setFromStep(from_step);
  auto counts = request.initCounts(static_cast<unsigned>(digests.size()));
  auto sums = request.initSums(static_cast<unsigned>(digests.size()));
  for (size_t i = 0; i < digests.size(); ++i) {
    counts.set(static_cast<unsigned>(i), digests[i].count);
    sums.set(static_cast<unsigned>(i), digests[i].sum);
  }
  reports_.add(request.send().ignoreResult());
}

void WorkerStore::taskFailed(kj::Exception&& e) {
  // The coordinator is away or re-planned the job: the ledger of this plan is no longer kept.
  PSLOG(kDebug) << "job " << reporter_.job_id << ": a report of examples read was not delivered: "
                << e.getDescription().cStr();
}

}  // namespace pstrain
