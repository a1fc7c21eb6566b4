// A step's rows of the model's sparse embedding tables (docs/DESIGN-NOTES.md "Sparse models").
//
// A sparse table is never read whole: before a step, its caller collects the ids the step's batch
// holds for the table (collect_ids: ascending, distinct), finds their rows wherever they live (a
// whole table in the trainer's parameters, rows pulled from the servers in a worker) and hands
// the model one SparseTableRows per table (Model::use_sparse_rows). The embedding layer then
// reads row ids[k] at values[k], and backward writes the batch's summed gradient of that row at
// grads + k * dim: a compact gradient, which the caller scales and applies to the listed rows only
// (Optimizer::apply_rows).
//
// Thread rules: SparseStep is used by one thread at a time; the views it hands out stay valid
// until its next collect().
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "common/base/aligned.h"
#include "common/engine/model_spec.h"
#include "common/engine/param_layout.h"

namespace pstrain::nn {

// One step's rows of one sparse table, as views into their owner's storage.
template <typename T>
struct SparseTableRows {
  std::span<const uint32_t> ids;     // the rows the batch reads: ascending, distinct
  std::span<const T* const> values;  // values[k]: row ids[k], dim values
  T* grads = nullptr;                // ids.size() x dim, written by Model::compute_gradients
};

// A sparse table of a model: where it is in the layout and which input features hold its ids.
struct SparseTable {
  size_t param = 0;  // in the layout's params()
  IdColumns columns;
  int64_t rows = 0, dim = 0;
  bool padding = false;  // its layer has a combiner: negative ids are padding, not rows
};

// The model's sparse tables, in layout order.
std::vector<SparseTable> sparse_tables(const ModelSpec& spec, const ParamLayout& layout);

// The ids `table` reads in `batch` examples of `inputs` (input_size values each, one example after
// the other), ascending and distinct, into `ids`. Throws Error naming the first value that is not
// an id of the table (an integer in [0, rows); or a negative integer, padding, where the table has
// it).
template <typename T>
void collect_ids(const SparseTable& table, const T* inputs, int64_t input_size, int64_t batch, std::vector<uint32_t>& ids);

// The storage behind a step's SparseTableRows, for every sparse table of a model.
template <typename T>
class SparseStep {
 public:
  explicit SparseStep(std::vector<SparseTable> tables);

  const std::vector<SparseTable>& tables() const { return tables_; }
  bool empty() const { return tables_.empty(); }

  // Collects every table's ids of the batch (collect_ids) and sizes the gradients for them.
  void collect(const T* inputs, int64_t input_size, int64_t batch);
  const std::vector<uint32_t>& ids(size_t t) const { return ids_[t]; }
  // Table t's rows from a whole table in `params` (laid out by `layout`).
  void point_into(size_t t, const ParamLayout& layout, const T* params);
  // Table t's rows from `rows` (ids(t).size() x dim, in the order of ids(t)).
  void point_into_compact(size_t t, const T* rows);
  // The views for Model::use_sparse_rows, and table t's compact gradient.
  std::span<const SparseTableRows<T>> rows() const { return rows_; }
  std::span<T> grads(size_t t) { return {grads_[t].data(), grads_[t].size()}; }

 private:
  std::vector<SparseTable> tables_;
  std::vector<std::vector<uint32_t>> ids_;
  std::vector<std::vector<const T*>> values_;
  std::vector<std::vector<T, CacheAlignedAllocator<T>>> grads_;
  std::vector<SparseTableRows<T>> rows_;
};

}  // namespace pstrain::nn
