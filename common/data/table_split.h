// A table split as a job trains on it: the preprocessing (preprocessing.h) fitted on the examples
// the job trains on, and each split turned into float32 features of the fitted width. A text split
// (Split::documents) the same way: its tokenizer (preprocessing.text) fitted on the training
// documents, each split tokenized as it is read. Shared by
// the coordinator's data service (once per job, on its loading thread) and pstrain-train.
//
// Thread rules: pure functions.
#pragma once

#include <memory>

#include "common/data/dataset.h"
#include "common/data/preprocessing.h"

namespace pstrain {

// Fits on `train` (a table split: the training part, after any validation hold-out; its table's
// missing counts are the whole train split's, which decide the default indicators), in passes
// over its rows (a stored split is read 4,096 rows at a time: nothing is held per row).
FittedPreprocessing fit_on_split(const PreprocessingSpec& spec, const Split& train);

// `raw` (a split of the same table) as features: shape {fitted.width()}, float32, its labels or
// targets, no table. A stored split stays on disk, preprocessed as it is read (a preprocessed
// StoredExamples view); a split in memory is preprocessed into memory.
Split preprocess_split(const Split& raw, const FittedPreprocessing& fitted);

// The three splits of a job on a table, preprocessed, and what was fitted.
struct PreparedTable {
  std::shared_ptr<const FittedPreprocessing> fitted;
  std::shared_ptr<const Split> train, validation, test;  // validation may be null
};
PreparedTable prepare_table(const PreprocessingSpec& spec, const Split& train, const Split* validation, const Split& test);

}  // namespace pstrain
