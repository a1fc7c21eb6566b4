// What preprocessing.cc and preprocessing_fit.cc share: a column's steps as the spec resolves
// them (the column's own, else its type's, else the built-in defaults). Internal to
// common/data; users read preprocessing.h.
//
// Thread rules: plain values and pure functions.
#pragma once

#include <cstdint>
#include <string>

#include "common/data/preprocessing.h"

namespace pstrain::preprocessing_detail {

struct Resolved {
  Scaling scale = Scaling::kNone;
  Imputation impute = Imputation::kMostFrequent;
  double fill_value = 0;
  bool indicator = true;
  uint32_t max_categories = kDefaultMaxCategories;
  Encoding encode = Encoding::kOneHot;
  uint32_t num_bins = 0;  // encode kHash
  std::string separator;  // multi-valued (encode kHash, categorical)
  uint32_t max_values = 0;
  bool drop = false;
};

Resolved resolve(const PreprocessingSpec& spec, const TableColumn& column);

}  // namespace pstrain::preprocessing_detail
