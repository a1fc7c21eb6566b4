#include "coordinator/datasets/data_service.h"

#include <algorithm>
#include <cstring>
#include <functional>

#include "common/base/cross_thread.h"
#include "common/base/error.h"
#include "common/rpc/rpc_util.h"

namespace pstrain {
namespace {

// Serves batches from a function that produces the indices of batch `step`. A split held in
// memory is copied into the reply on the event loop; a stored one (Split::stored) is read on the
// service's reading thread, whose queue keeps replies in the order of the calls.
class BatchStream final : public proto::DataStream::Server {
 public:
  BatchStream(std::shared_ptr<const Split> split, uint32_t epoch, int64_t from_step, int64_t steps,
              std::function<std::vector<uint32_t>(int64_t)> batch_at, std::shared_ptr<TaskThread> reading)
      : split_(std::move(split)), epoch_(epoch), step_(from_step), steps_(steps), batch_at_(std::move(batch_at)),
        reading_(std::move(reading)) {}

 protected:
  kj::Promise<void> next(NextContext context) override {
    const uint32_t wanted = std::clamp<uint32_t>(context.getParams().getMaxBatches(), 1, DataService::kMaxBatchesPerCall);
    const auto count = static_cast<uint32_t>(std::clamp<int64_t>(steps_ - step_, 0, wanted));
    if (!split_->stored) {
      auto results = context.getResults();
      auto batches = results.initBatches(count);
      for (uint32_t b = 0; b < count; ++b, ++step_) {
        DataService::fill_batch(*split_, epoch_, step_, batch_at_(step_), batches[b]);
      }
      results.setEnd(step_ >= steps_);
      return kj::READY_NOW;
    }
    // The steps are claimed (and reported served) now, in call order; their bytes come later.
    struct Read {
      int64_t first = 0;
      std::vector<std::vector<uint32_t>> indices;
      std::vector<std::vector<uint8_t>> bytes;
    };
    auto read = std::make_shared<Read>();
    read->first = step_;
    for (uint32_t b = 0; b < count; ++b, ++step_) read->indices.push_back(batch_at_(step_));
    read->bytes.resize(count);
    const bool end = step_ >= steps_;
    auto paf = make_cross_thread_paf<void>();
    reading_->post([split = split_, read, fulfiller = paf.fulfiller]() {
      try {
        for (size_t b = 0; b < read->indices.size(); ++b) {
          read->bytes[b].resize(read->indices[b].size() * split->example_bytes());
          split->read_examples(read->indices[b], read->bytes[b].data());
        }
        fulfiller->fulfill();
      } catch (const std::exception& e) {
        fulfiller->reject(kj::Exception(kj::Exception::Type::FAILED, __FILE__, __LINE__, kj::str(e.what())));
      }
    });
    return paf.promise.then([split = split_, epoch = epoch_, context, read, end]() mutable {
      auto results = context.getResults();
      auto batches = results.initBatches(static_cast<unsigned>(read->indices.size()));
      for (size_t b = 0; b < read->indices.size(); ++b) {
        DataService::fill_batch(*split, epoch, read->first + static_cast<int64_t>(b), read->indices[b],
                                read->bytes[b].data(), batches[static_cast<unsigned>(b)]);
      }
      results.setEnd(end);
    });
  }

 private:
  std::shared_ptr<const Split> split_;
  uint32_t epoch_;
  int64_t step_, steps_;
  std::function<std::vector<uint32_t>(int64_t)> batch_at_;
  std::shared_ptr<TaskThread> reading_;
};

}  // namespace

void DataService::fill_batch(const Split& split, uint32_t epoch, int64_t step, const std::vector<uint32_t>& indices,
                             proto::Batch::Builder batch) {
  fill_batch(split, epoch, step, indices, nullptr, batch);
}

void DataService::fill_batch(const Split& split, uint32_t epoch, int64_t step, const std::vector<uint32_t>& indices,
                             const uint8_t* bytes, proto::Batch::Builder batch) {
  const size_t example_bytes = split.example_bytes();
  batch.setEpoch(epoch);
  batch.setStep(static_cast<uint64_t>(step));
  batch.setSize(static_cast<uint32_t>(indices.size()));
  batch.setExampleSize(split.example_size());
  batch.setDtype(rpc::to_wire(split.dtype));
  auto examples = batch.initExamples(indices.size() * example_bytes);
  if (bytes != nullptr) {
    if (examples.size() > 0) std::memcpy(examples.begin(), bytes, examples.size());
  } else {
    split.read_examples(indices, examples.begin());
  }
  auto list = batch.initIndices(static_cast<unsigned>(indices.size()));
  for (size_t i = 0; i < indices.size(); ++i) list.set(static_cast<unsigned>(i), indices[i]);
  if (split.regression()) {
    const size_t width = split.target_width;
    auto targets = batch.initTargets(static_cast<unsigned>(indices.size() * width));
    for (size_t i = 0; i < indices.size(); ++i) {
      for (size_t k = 0; k < width; ++k) {
        targets.set(static_cast<unsigned>(i * width + k), split.targets[size_t{indices[i]} * width + k]);
      }
    }
  } else {
    auto labels = batch.initLabels(static_cast<unsigned>(indices.size()));
    for (size_t i = 0; i < indices.size(); ++i) labels.set(static_cast<unsigned>(i), split.labels[indices[i]]);
  }
}

kj::Promise<std::shared_ptr<const Split>> DataService::load(const std::string& dataset, SplitKind kind) {
  const Key key(dataset, static_cast<int>(kind));
  const uint64_t generation = generation_ ? generation_(dataset) : 0;
  auto it = splits_.find(key);
  if (it == splits_.end() || it->second->failed || it->second->generation != generation) {
    auto paf = make_cross_thread_paf<std::shared_ptr<const Split>>();
    loading_.post([this, fulfiller = paf.fulfiller, dataset, kind]() mutable {
      try {
        fulfiller->fulfill(std::make_shared<const Split>(loader_(dataset, kind)));
      } catch (const std::exception& e) {
        fulfiller->reject(kj::Exception(kj::Exception::Type::FAILED, __FILE__, __LINE__, kj::str(e.what())));
      }
    });
    const uint64_t id = next_id_++;
    // The entry may be gone (forget()) or replaced when the load fails: look it up again.
    auto forked = paf.promise
                      .catch_([this, key, id](kj::Exception&& e) -> std::shared_ptr<const Split> {
                        auto found = splits_.find(key);
                        if (found != splits_.end() && found->second->id == id) found->second->failed = true;
                        kj::throwFatalException(kj::mv(e));
                      })
                      .fork();
    it = splits_.insert_or_assign(key, std::make_unique<Loading>(Loading{kj::mv(forked), id, generation})).first;
  }
  return it->second->split.addBranch();
}

kj::Promise<std::shared_ptr<const HeldOut>> DataService::hold_out(std::shared_ptr<const Split> train, double fraction,
                                                                  uint64_t seed) {
  auto paf = make_cross_thread_paf<std::shared_ptr<const HeldOut>>();
  loading_.post([fulfiller = paf.fulfiller, train = std::move(train), fraction, seed]() mutable {
    try {
      fulfiller->fulfill(std::make_shared<const HeldOut>(hold_out_validation(*train, fraction, seed)));
    } catch (const std::exception& e) {
      fulfiller->reject(kj::Exception(kj::Exception::Type::FAILED, __FILE__, __LINE__, kj::str(e.what())));
    }
  });
  return kj::mv(paf.promise);
}

kj::Promise<std::shared_ptr<const PreparedTable>> DataService::prepare_table(PreprocessingSpec spec,
                                                                          std::shared_ptr<const Split> train,
                                                                          std::shared_ptr<const Split> validation,
                                                                          std::shared_ptr<const Split> test) {
  auto paf = make_cross_thread_paf<std::shared_ptr<const PreparedTable>>();
  loading_.post([fulfiller = paf.fulfiller, spec = std::move(spec), train = std::move(train),
                 validation = std::move(validation), test = std::move(test)]() mutable {
    try {
      fulfiller->fulfill(std::make_shared<const PreparedTable>(pstrain::prepare_table(spec, *train, validation.get(), *test)));
    } catch (const std::exception& e) {
      fulfiller->reject(kj::Exception(kj::Exception::Type::FAILED, __FILE__, __LINE__, kj::str(e.what())));
    }
  });
  return kj::mv(paf.promise);
}

kj::Promise<std::shared_ptr<const JobData>> DataService::prepare(DataRecipe given) {
  auto recipe = std::make_shared<const DataRecipe>(std::move(given));
  auto data = std::make_shared<JobData>();
  auto test = load(recipe->dataset, SplitKind::kTest);  // both splits load at once
  return load(recipe->dataset, SplitKind::kTrain)
      .then([this, recipe, data](std::shared_ptr<const Split> train) -> kj::Promise<void> {
        if (recipe->validation_fraction <= 0) {
          data->train = std::move(train);
          return kj::READY_NOW;
        }
        // The validation hold-out: the job trains on the rest (its plan, epochs and ledger too).
        return hold_out(std::move(train), recipe->validation_fraction, recipe->seed)
            .then([data](std::shared_ptr<const HeldOut> held) {
              data->train = std::shared_ptr<const Split>(held, &held->train);
              data->validation = std::shared_ptr<const Split>(held, &held->validation);
            });
      })
      .then([test = kj::mv(test)]() mutable { return kj::mv(test); })
      .then([this, recipe, data](std::shared_ptr<const Split> test) -> kj::Promise<void> {
        if (recipe->class_weight.kind != ClassWeightSpec::Kind::kNone) {
          try {  // on the training examples, before a table's preprocessing (its class names)
            data->class_weights = resolve_class_weights(recipe->class_weight, recipe->loss, *data->train);
          } catch (const SpecError& e) {
            kj::throwFatalException(kj::Exception(kj::Exception::Type::FAILED, __FILE__, __LINE__,
                                                  kj::str("dataset '", data->train->dataset, "' as loaded: ", e.what())));
          }
        }
        if (!data->train->table && !data->train->documents) {
          data->test = std::move(test);
          return kj::READY_NOW;
        }
        // A table: the job trains on its preprocessed features, fitted on its training part.
        return prepare_table(recipe->preprocessing, data->train, data->validation, std::move(test))
            .then([data](std::shared_ptr<const PreparedTable> prepared) {
              data->preprocessing = prepared->fitted;
              data->train = std::shared_ptr<const Split>(prepared, prepared->train.get());
              data->test = std::shared_ptr<const Split>(prepared, prepared->test.get());
              if (prepared->validation) data->validation = std::shared_ptr<const Split>(prepared, prepared->validation.get());
            });
      })
      .then([data]() -> std::shared_ptr<const JobData> { return data; });
}

void DataService::forget(const std::string& dataset) {
  for (SplitKind kind : {SplitKind::kTrain, SplitKind::kTest}) splits_.erase(Key(dataset, static_cast<int>(kind)));
}

proto::DataStream::Client DataService::open_train(std::shared_ptr<const Split> split, const DataPlan& plan,
                                                  uint32_t epoch, uint32_t worker, int64_t from_step, Served served) {
  auto shard = std::make_shared<DataPlan::EpochShard>(plan.shard(epoch, worker));
  const int64_t steps = shard->steps();
  return kj::heap<BatchStream>(
      std::move(split), epoch, from_step, steps,
      [shard, served](int64_t step) {
    std::vector<uint32_t> indices = shard->batch(step);
        if (served) served(step, indices);
        return indices;
      },
      reading_);
}

proto::DataStream::Client DataService::open_test(std::shared_ptr<const Split> split, uint32_t worker, uint32_t workers,
                                                 int64_t batch) {
  const EvaluationBlock block = EvaluationBlock::of(split->size, worker, workers, batch);
  return kj::heap<BatchStream>(std::move(split), 0, 0, block.steps(),
                               [block](int64_t step) { return block.examples(step); }, reading_);
}

}  // namespace pstrain
