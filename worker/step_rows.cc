#include "worker/step_rows.h"

#include "worker/batch_decode.h"

namespace pstrain {

StepRows::StepRows(InputSparsity sparsity, size_t chunks)
    : sparsity_(std::move(sparsity)), push_(chunks, std::nullopt), reply_(chunks, std::nullopt) {}

std::string StepRows::describe() const { return active() ? ", row-sparse exchange of the first layer" : ""; }

std::vector<InputSparsity::Ranges> StepRows::marked(proto::Batch::Reader batch) {
  const BatchExamples examples = checked_examples(batch, sparsity_.features());
  sparsity_.mark_features(examples.bytes, examples.dtype, examples.count, sparsity_.features(), &feature_mask_);
  return sparsity_.chunk_ranges(feature_mask_);
}

void StepRows::plan(proto::Batch::Reader batch, kj::Maybe<proto::Batch::Reader> next) {
  if (!active()) return;
  push_ = marked(batch);
  KJ_IF_MAYBE(n, next) {
    reply_ = marked(*n);
  } else {
    reply_.assign(reply_.size(), std::nullopt);
  }
}

}  // namespace pstrain
