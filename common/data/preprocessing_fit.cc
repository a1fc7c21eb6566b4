// Fitting a table's preprocessing in passes over its rows (preprocessing.h fit_preprocessing):
// the statistics every column needs are accumulated chunk by chunk, so a table larger than
// memory fits in a few numbers per column.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <memory>

#include "common/base/error.h"
#include "common/data/id_hash.h"
#include "common/data/preprocessing.h"
#include "common/data/preprocessing_steps.h"
#include "common/data/top_keys.h"

namespace pstrain {
namespace {

using preprocessing_detail::Resolved;

// An order-preserving key of a float: keys compare as the floats do (-0 before +0).
uint32_t order_key(float v) {
  uint32_t bits = 0;
  std::memcpy(&bits, &v, 4);
  return (bits & 0x80000000u) ? ~bits : bits | 0x80000000u;
}

float from_key(uint32_t key) {
  const uint32_t bits = (key & 0x80000000u) ? key & 0x7FFFFFFFu : ~key;
  float v = 0;
  std::memcpy(&v, &bits, 4);
  return v;
}

// The exact median of a column's present values in two passes: a histogram of the keys' high
// 16 bits finds the buckets holding ranks (n - 1) / 2 and n / 2, a histogram of the low 16 bits
// inside them finds the values.
class MedianSelect {
 public:
  void first(float v) {
    if (high_.empty()) high_.assign(kBuckets, 0);
    ++high_[order_key(v) >> 16];
  }
  // After the first pass: locates the two ranks among `n` values.
  void locate(uint64_t n) {
    const uint64_t ranks[2] = {(n - 1) / 2, n / 2};
    for (int r = 0; r < 2; ++r) {
      uint64_t before = 0;
      uint32_t b = 0;
      while (before + high_[b] <= ranks[r]) before += high_[b++];
      bucket_[r] = b;
      offset_[r] = ranks[r] - before;
      low_[r].assign(kBuckets, 0);
    }
    high_ = {};
  }
  void second(float v) {
    const uint32_t key = order_key(v);
    for (int r = 0; r < 2; ++r) {
      if (key >> 16 == bucket_[r]) ++low_[r][key & 0xFFFF];
    }
  }
  double median() const {
    double v[2];
    for (int r = 0; r < 2; ++r) {
      uint64_t before = 0;
      uint32_t low = 0;
      while (before + low_[r][low] <= offset_[r]) before += low_[r][low++];
      v[r] = from_key(bucket_[r] << 16 | low);
    }
    return bucket_[0] == bucket_[1] && v[0] == v[1] ? v[0] : (v[0] + v[1]) / 2;
  }

 private:
  static constexpr size_t kBuckets = 1 << 16;
  std::vector<uint64_t> high_;
  uint32_t bucket_[2] = {0, 0};
  uint64_t offset_[2] = {0, 0};
  std::vector<uint64_t> low_[2];
};

// One stored column's statistics over the passes.
struct ColumnFit {
  Resolved steps;
  bool fitted = false;         // not dropped
  bool categorical = false;
  std::vector<uint64_t> category_counts;  // by code
  uint64_t present = 0;
  double sum = 0;               // of the present values, in example order
  double min = 0, max = 0;      // of the present values
  std::map<double, uint64_t> frequencies;  // impute most_frequent (numeric, boolean)
  MedianSelect median;          // impute median
  std::unique_ptr<TopIds> top;  // an id column looked up (encode "ids"): its ids' counts
  double fill = 0, mean = 0, squares = 0;
};

}  // namespace

FittedPreprocessing fit_preprocessing(const PreprocessingSpec& spec, const TableSchema& schema,
                                      const TableSchema& train_schema, const RowPass& pass) {
  FittedPreprocessing fitted;
  fitted.label = schema.label;
  fitted.class_names = schema.class_names;
  for (const TableColumn& c : schema.columns) {
    if (c.type == ColumnType::kIgnored || c.type == ColumnType::kText) fitted.other_columns.push_back(c.name);
  }
  const std::vector<const TableColumn*> stored = schema.stored_columns();
  const std::vector<const TableColumn*> train_stored = train_schema.stored_columns();
  const size_t width = stored.size();
  const size_t row = schema.row_width();  // values in a stored row (an id takes two)
  std::vector<size_t> at(width);          // a stored column's first value in a row
  for (size_t k = 1; k < width; ++k) at[k] = at[k - 1] + stored_values(stored[k - 1]->type);
  std::vector<ColumnFit> fits(width);
  bool any_median = false, any_standardize = false;
  for (size_t k = 0; k < width; ++k) {
    ColumnFit& c = fits[k];
    c.steps = preprocessing_detail::resolve(spec, *stored[k]);
    // A hashed column (an id column always is) needs no statistics.
    c.fitted = !c.steps.drop && c.steps.encode != Encoding::kHash && stored[k]->type != ColumnType::kId;
    c.categorical = stored[k]->type == ColumnType::kCategorical;
    if (c.categorical) c.category_counts.assign(stored[k]->categories.size(), 0);
    if (stored[k]->type == ColumnType::kId && !c.steps.drop && c.steps.encode == Encoding::kIds) {
      c.top = std::make_unique<TopIds>(std::min<size_t>(std::max<size_t>(size_t{4} * c.steps.max_categories, kIdCounters), size_t{1} << 20));
    }
    const bool numbers = c.fitted && !c.categorical;
    any_median = any_median || (numbers && c.steps.impute == Imputation::kMedian);
    any_standardize = any_standardize || (numbers && c.steps.scale == Scaling::kStandardize);
  }

  // Pass 1: counts, sums, extremes, frequencies, the medians' first histograms.
  uint64_t rows = 0;
  pass([&](std::span<const float> values, size_t n) {
    for (size_t i = 0; i < n; ++i) {
      for (size_t k = 0; k < width; ++k) {
        ColumnFit& c = fits[k];
        const float v = values[i * row + at[k]];
        if (c.top != nullptr && !std::isnan(v)) {
          uint64_t fingerprint = 0;
          if (fingerprint_from_values(v, values[i * row + at[k] + 1], &fingerprint)) c.top->add(fingerprint);
          continue;
        }
        if (!c.fitted || std::isnan(v)) continue;
        if (c.categorical) {
          const auto code = static_cast<size_t>(v);
          if (code >= c.category_counts.size()) {
            throw DataError("column '" + stored[k]->name + "': category code " + std::to_string(code) + " of " +
                            std::to_string(c.category_counts.size()) + " categories");
          }
          ++c.category_counts[code];
          continue;
        }
        const double d = v;
        c.min = c.present == 0 ? d : std::min(c.min, d);
        c.max = c.present == 0 ? d : std::max(c.max, d);
        ++c.present;
        c.sum += d;
        if (c.steps.impute == Imputation::kMostFrequent) ++c.frequencies[d];
        if (c.steps.impute == Imputation::kMedian) c.median.first(v);
      }
    }
    rows += n;
  });
  // Pass 2, for medians.
  if (any_median) {
    for (ColumnFit& c : fits) {
      if (c.fitted && !c.categorical && c.steps.impute == Imputation::kMedian && c.present > 0) c.median.locate(c.present);
    }
    pass([&](std::span<const float> values, size_t n) {
      for (size_t i = 0; i < n; ++i) {
        for (size_t k = 0; k < width; ++k) {
          ColumnFit& c = fits[k];
          const float v = values[i * row + at[k]];
          if (c.fitted && !c.categorical && c.steps.impute == Imputation::kMedian && !std::isnan(v)) c.median.second(v);
        }
      }
    });
  }
  // The fills, then the scaling's mean over the filled values (the present ones in order, then
  // the fills), as the model sees them.
  for (ColumnFit& c : fits) {
    if (!c.fitted || c.categorical) continue;
    c.fill = c.steps.fill_value;
    if (c.present > 0) {
      switch (c.steps.impute) {
        case Imputation::kMean: c.fill = c.sum / static_cast<double>(c.present); break;
        case Imputation::kMedian: c.fill = c.median.median(); break;
        case Imputation::kMostFrequent: {
          uint64_t best = 0;
          for (const auto& [v, count] : c.frequencies) {
            if (count > best) best = count, c.fill = v;  // ties: the smallest value
          }
          break;
        }
        case Imputation::kConstant: break;
      }
    }
    c.fill = static_cast<float>(c.fill);  // the fill as the model sees it
    if (c.steps.scale == Scaling::kStandardize && rows > 0) {
      double sum = c.sum;
      for (uint64_t i = c.present; i < rows; ++i) sum += c.fill;
      c.mean = sum / static_cast<double>(rows);
    }
  }
  // Pass 3, for standardization: the squared deviations, in the same order.
  if (any_standardize && rows > 0) {
    pass([&](std::span<const float> values, size_t n) {
      for (size_t i = 0; i < n; ++i) {
        for (size_t k = 0; k < width; ++k) {
          ColumnFit& c = fits[k];
          const float v = values[i * row + at[k]];
          if (c.fitted && !c.categorical && c.steps.scale == Scaling::kStandardize && !std::isnan(v)) {
            c.squares += (v - c.mean) * (v - c.mean);
          }
        }
      }
    });
  }

  for (size_t k = 0; k < width; ++k) {
    const TableColumn& column = *stored[k];
    ColumnFit& c = fits[k];
    const Resolved& r = c.steps;
    FittedColumn f;
    f.name = column.name;
    f.type = column.type;
    f.dropped = r.drop;
    f.ids = c.categorical && r.encode == Encoding::kIds;
    f.bins = r.encode == Encoding::kHash ? r.num_bins : 0;
    if (f.bins > 0 && c.categorical && r.max_values > 0) {
      f.separator = r.separator;
      f.values = r.max_values;
    }
    f.indicator = r.indicator && k < train_stored.size() && train_stored[k]->profile.missing > 0;
    if (column.type == ColumnType::kId && !f.dropped && f.bins == 0) {
      if (c.top == nullptr) throw DataError("column '" + column.name + "' is an id column: it is hashed, looked up or dropped");
      f.ids = true;
      f.vocabulary = c.top->top(r.max_categories);
      std::sort(f.vocabulary.begin(), f.vocabulary.end());  // slots in fingerprint order
      fitted.columns.push_back(std::move(f));
      continue;
    }
    if (f.dropped || f.bins > 0) {
      fitted.columns.push_back(std::move(f));
      continue;
    }
    if (c.categorical) {
      // Counts by category name (this split's codes name them); ties by name.
      std::map<std::string, uint64_t> counts;
      for (size_t code = 0; code < c.category_counts.size(); ++code) {
        if (c.category_counts[code] > 0) counts[column.categories[code]] += c.category_counts[code];
      }
      std::vector<std::pair<std::string, uint64_t>> ranked(counts.begin(), counts.end());
      std::stable_sort(ranked.begin(), ranked.end(), [](const auto& a, const auto& b) { return a.second > b.second; });
      if (ranked.size() > r.max_categories) ranked.resize(r.max_categories);
      for (const auto& [name, n] : ranked) f.categories.push_back(name);
      std::sort(f.categories.begin(), f.categories.end());
      f.fill_category = static_cast<uint32_t>(f.categories.size());  // other
      if (r.impute == Imputation::kMostFrequent && !ranked.empty()) {
        f.fill_category = static_cast<uint32_t>(
            std::lower_bound(f.categories.begin(), f.categories.end(), ranked.front().first) - f.categories.begin());
      }
      fitted.columns.push_back(std::move(f));
      continue;
    }
    f.fill = static_cast<float>(c.fill);
    const double fill = f.fill;
    if (r.scale == Scaling::kStandardize) {
      double squares = c.squares;
      for (uint64_t i = c.present; i < rows; ++i) squares += (fill - c.mean) * (fill - c.mean);
      const double std = rows == 0 ? 0 : std::sqrt(squares / static_cast<double>(rows));
      f.offset = static_cast<float>(rows == 0 ? 0 : c.mean);
      f.scale = std > 0 ? static_cast<float>(1.0 / std) : 1.0f;
    } else if (r.scale == Scaling::kMinMax) {
      double min = c.min, max = c.max;
      if (c.present < rows) {
        min = c.present == 0 ? fill : std::min(min, fill);
        max = c.present == 0 ? fill : std::max(max, fill);
      }
      if (rows == 0) min = max = 0;
      f.offset = static_cast<float>(min);
      f.scale = max > min ? static_cast<float>(1.0 / (max - min)) : 1.0f;
    }
    fitted.columns.push_back(std::move(f));
  }
  for (const CrossSpec& x : spec.crosses) {
    FittedCross cross{x.name, {}, x.num_bins};
    for (const std::string& name : x.columns) {
      const auto it = std::find_if(stored.begin(), stored.end(), [&](const TableColumn* c) { return c->name == name; });
      if (it == stored.end()) throw DataError("cross '" + x.name + "': '" + name + "' is not a stored column of the table");
      cross.columns.push_back(static_cast<uint32_t>(it - stored.begin()));
    }
    fitted.crosses.push_back(std::move(cross));
  }
  return fitted;
}

FittedPreprocessing fit_preprocessing(const PreprocessingSpec& spec, const TableSchema& schema,
                                      const TableSchema& train_schema, std::span<const float> values, size_t rows) {
  return fit_preprocessing(spec, schema, train_schema, [&](const RowChunk& chunk) { chunk(values, rows); });
}

}  // namespace pstrain
