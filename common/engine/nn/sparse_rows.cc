#include "common/engine/nn/sparse_rows.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "common/base/error.h"

namespace pstrain::nn {

std::vector<SparseTable> sparse_tables(const ModelSpec& spec, const ParamLayout& layout) {
  std::vector<SparseTable> tables;
  const ModelGraph graph = model_graph(spec);
  for (size_t p = layout.dense_count(); p < layout.params().size(); ++p) {
    const ParamInfo& info = layout.params()[p];
    const auto layer = static_cast<size_t>(info.layer_index);
    tables.push_back({p, sparse_id_columns(spec, graph, layer), info.shape[0], info.shape[1],
                      spec.layers[layer].combiner != Combiner::kNone});
  }
  return tables;
}

template <typename T>
void collect_ids(const SparseTable& table, const T* inputs, int64_t input_size, int64_t batch, std::vector<uint32_t>& ids) {
  ids.clear();
  ids.reserve(static_cast<size_t>(batch * table.columns.size));
  for (int64_t b = 0; b < batch; ++b) {
    const T* x = inputs + b * input_size + table.columns.begin;
    for (int64_t i = 0; i < table.columns.size; ++i) {
      const T v = x[i];
      if (table.padding && v < T(0) && v == std::floor(v)) continue;
      if (!(v >= T(0) && v < static_cast<T>(table.rows)) || v != std::floor(v)) {
        throw Error("embedding: input " + std::to_string(static_cast<double>(v)) + " (value " +
                    std::to_string(table.columns.begin + i) + " of an example) is not an id in 0.." +
                    std::to_string(table.rows - 1));
      }
      ids.push_back(static_cast<uint32_t>(v));
    }
  }
  std::sort(ids.begin(), ids.end());
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
}

template <typename T>
SparseStep<T>::SparseStep(std::vector<SparseTable> tables)
    : tables_(std::move(tables)), ids_(tables_.size()), values_(tables_.size()), grads_(tables_.size()), rows_(tables_.size()) {}

template <typename T>
void SparseStep<T>::collect(const T* inputs, int64_t input_size, int64_t batch) {
  for (size_t t = 0; t < tables_.size(); ++t) {
    collect_ids(tables_[t], inputs, input_size, batch, ids_[t]);
    values_[t].assign(ids_[t].size(), nullptr);
    grads_[t].resize(ids_[t].size() * static_cast<size_t>(tables_[t].dim));
    rows_[t] = {ids_[t], values_[t], grads_[t].data()};
  }
}

template <typename T>
void SparseStep<T>::point_into(size_t t, const ParamLayout& layout, const T* params) {
  const T* table = params + layout.params()[tables_[t].param].offset;
  for (size_t k = 0; k < ids_[t].size(); ++k) values_[t][k] = table + int64_t{ids_[t][k]} * tables_[t].dim;
}

template <typename T>
void SparseStep<T>::point_into_compact(size_t t, const T* rows) {
  for (size_t k = 0; k < ids_[t].size(); ++k) values_[t][k] = rows + static_cast<int64_t>(k) * tables_[t].dim;
}

template void collect_ids<float>(const SparseTable&, const float*, int64_t, int64_t, std::vector<uint32_t>&);
template void collect_ids<double>(const SparseTable&, const double*, int64_t, int64_t, std::vector<uint32_t>&);
template class SparseStep<float>;
template class SparseStep<double>;

}  // namespace pstrain::nn
