#include "common/engine/nn/data_parallel_model.h"

#include <exception>
#include <type_traits>

#include "common/base/error.h"
#include "common/engine/simd/segmented_product.h"

namespace pstrain::nn {

namespace {

// The exception of the lowest replica that threw, if any.
void rethrow_first(const std::vector<std::exception_ptr>& errors) {
  for (const std::exception_ptr& e : errors) {
    if (e) std::rethrow_exception(e);
  }
}

// Kernels of at least this many values (1 MiB, more than a core's L1 and L2 hold with the layer's
// operands on the CPUs we measured) are multiplied out by all threads together.
constexpr size_t kMinTogether = size_t{1} << 18;

}  // namespace

template <typename T>
DataParallelModel<T>::DataParallelModel(const ModelSpec& spec, int64_t max_batch, int replicas, const LossSpec& loss)
    : max_batch_(max_batch) {
  replicas = std::max(1, std::min<int>(replicas, static_cast<int>(max_batch)));
  const int64_t share = (max_batch + replicas - 1) / replicas;
  for (int r = 0; r < replicas; ++r) {
    // Replica 0 also evaluates a whole batch smaller than the replica count: up to replicas - 1
    // examples, more than its share when max_batch < replicas^2.
    const int64_t capacity = r == 0 ? std::max<int64_t>(share, replicas - 1) : share;
    replicas_.push_back(std::make_unique<Model<T>>(spec, capacity, loss));
    if (r > 0) replica_grads_.emplace_back(replicas_.back()->layout().dense_size());
  }
  replica_rows_.resize(replicas_.size() - 1);
  replica_sparse_grads_.resize(replicas_.size() - 1);
  const Model<T>& model = *replicas_.front();
  const auto& params = model.layout().params();
  const size_t dense = model.layout().dense_size();
  size_t begin = 0;
  if constexpr (std::is_same_v<T, float>) {
    // Not a layer on the model's input: its backward skips the features a slice leaves at zero
    // (Dense's sparse kernel gradient, faster there; and +0 for them even where the slice's
    // output gradient holds an infinity, where a product over every feature gives NaN). Nor
    // kernels smaller than kMinTogether, whose per-replica buffers stay in cache and whose sum
    // costs next to nothing.
    for (size_t p = 0; replicas > 1 && p < model.layout().dense_count(); ++p) {
      if (!model.is_dense_kernel(p) || model.is_input_dense_kernel(p) || params[p].size < kMinTogether) {
        continue;
      }
      deferred_.resize(params.size(), false);
      deferred_[p] = true;
      if (params[p].offset > begin) summed_ranges_.emplace_back(begin, params[p].offset);
      begin = params[p].offset + params[p].size;
    }
  }
  if (begin < dense) summed_ranges_.emplace_back(begin, dense);
}

template <typename T>
void DataParallelModel<T>::share_sparse_rows() {
  replicas_[0]->use_sparse_rows(sparse_rows_);
  for (size_t r = 1; r < replicas_.size(); ++r) {
    std::vector<SparseTableRows<T>>& rows = replica_rows_[r - 1];
    auto& grads = replica_sparse_grads_[r - 1];
    rows.assign(sparse_rows_.begin(), sparse_rows_.end());
    grads.resize(rows.size());
    for (size_t t = 0; t < rows.size(); ++t) {
      grads[t].resize(rows[t].ids.size() * static_cast<size_t>(sparse_tables()[t].dim));
      rows[t].grads = grads[t].data();
    }
    replicas_[r]->use_sparse_rows(rows);
  }
}

template <typename T>
void DataParallelModel<T>::sum_sparse_gradients() {
  for (size_t t = 0; t < sparse_rows_.size(); ++t) {
    T* out = sparse_rows_[t].grads;
    const size_t n = sparse_rows_[t].ids.size() * static_cast<size_t>(sparse_tables()[t].dim);
    for (size_t i = 0; i < n; ++i) {
      T sum = out[i];
      for (const auto& g : replica_sparse_grads_) sum += g[t][i];
      out[i] = sum;
    }
  }
}

template <typename T>
std::pair<int64_t, int64_t> DataParallelModel<T>::slice(int r, int64_t batch) const {
  const int64_t n = static_cast<int64_t>(replicas_.size());
  return {batch * r / n, batch * (r + 1) / n};
}

template <typename T>
LossResult DataParallelModel<T>::compute_gradients(const T* params, const T* inputs, const float* targets,
                                                   int64_t batch, T* grads,
                                                   const typename Model<T>::GradientsReady& ready,
                                                   const typename Model<T>::FactoredKernels* factored,
                                                   const ExampleKeys& keys) {
  const int n = replicas();
  if (on_slice_ && ready) throw Error("a slice-gradient callback announces nothing: not with `ready`");
  if (caller_sums_ && ready) throw Error("gradients the caller sums are announced by nobody: not with `ready`");
  unsummed_ = Unsummed::kNone;
  share_sparse_rows();
  if (n == 1) {
    const LossResult result = replicas_[0]->compute_gradients(params, inputs, targets, batch, grads, ready, factored, keys);
    if (on_slice_) on_slice_(0, grads);
    return result;
  }
  if (factored != nullptr) throw Error("factored kernel gradients need a single replica");

  std::vector<LossResult> results(static_cast<size_t>(n));
  const int64_t in = input_size();
  // A batch smaller than the replicas (an epoch's last) leaves some slices empty, as it leaves a
  // cluster's workers (common/data/data_plan.h): an empty slice's gradient is zero, added in its
  // place like a worker's zero push, so the trainer keeps the cluster's bits. Nothing is deferred
  // then (an empty slice leaves no factors), nor for the slice callback, which needs each
  // replica's whole gradient.
  const bool defer = multiply_together_ && !deferred_.empty() && !on_slice_ && batch >= n;
  // An exception must not leave an OpenMP region (it would end the process): each replica's is
  // kept and the lowest replica's rethrown after it (a bad label: the same error as one replica).
  // The gradients are unspecified then.
  std::vector<std::exception_ptr> errors(static_cast<size_t>(n));
#pragma omp parallel for num_threads(n) schedule(static, 1)
  for (int r = 0; r < n; ++r) {
    try {
      const auto [begin, end] = slice(r, batch);
      T* out = r == 0 ? grads : replica_grads_[static_cast<size_t>(r - 1)].data();
      if (end == begin) {
        zero_slice(r, out);
        continue;
      }
      const ExampleKeys part{keys.epoch, keys.ids != nullptr ? keys.ids + begin : nullptr};
      results[static_cast<size_t>(r)] = replicas_[static_cast<size_t>(r)]->compute_gradients(
          params, inputs + begin * in, targets + begin * target_size(), end - begin, out, {},
          defer ? &deferred_ : nullptr, part);
    } catch (...) {
      errors[static_cast<size_t>(r)] = std::current_exception();
    }
  }
  rethrow_first(errors);
  if (on_slice_) {
    on_slice_(0, grads);
    for (int r = 1; r < n; ++r) on_slice_(r, replica_grads_[static_cast<size_t>(r - 1)].data());
  }
  if (caller_sums_) {
    unsummed_ = defer ? Unsummed::kSummedRanges : Unsummed::kAll;
    if (defer) multiply_deferred_kernels(grads);
  } else if (defer) {
    sum_dense_gradients(grads);
    multiply_deferred_kernels(grads);
  } else {
    // Sum the replicas' gradients into grads, in replica order, splitting the range over threads.
    const auto total = static_cast<int64_t>(layout().dense_size());
#pragma omp parallel for num_threads(n) schedule(static)
    for (int64_t i = 0; i < total; ++i) {
      T sum = grads[i];
      for (const auto& g : replica_grads_) sum += g[static_cast<size_t>(i)];
      grads[i] = sum;
    }
  }
  sum_sparse_gradients();
  if (ready) ready(0);
  LossResult total_result;
  for (const auto& r : results) {
    total_result += r;
  }
  return total_result;
}

template <typename T>
void DataParallelModel<T>::sum_dense_gradients(T* grads) {
#pragma omp parallel num_threads(replicas())
  for (const auto& [begin, end] : summed_ranges_) {
    const auto first = static_cast<int64_t>(begin), last = static_cast<int64_t>(end);
#pragma omp for schedule(static) nowait
    for (int64_t i = first; i < last; ++i) {
      T sum = grads[i];
      for (const auto& g : replica_grads_) sum += g[static_cast<size_t>(i)];
      grads[i] = sum;
    }
  }
}

template <typename T>
void DataParallelModel<T>::zero_slice(int r, T* grads) {
  std::fill_n(grads, layout().dense_size(), T(0));
  const std::span<const SparseTableRows<T>> rows =
      r == 0 ? sparse_rows_ : std::span<const SparseTableRows<T>>(replica_rows_[static_cast<size_t>(r - 1)]);
  for (size_t t = 0; t < rows.size(); ++t) {
    std::fill_n(rows[t].grads, rows[t].ids.size() * static_cast<size_t>(sparse_tables()[t].dim), T(0));
  }
}

template <typename T>
void DataParallelModel<T>::sum_into(T* grads, size_t begin, size_t end) const {
  const auto add = [&](size_t from, size_t to) {
    from = std::max(from, begin);
    to = std::min(to, end);
    // Replica by replica over the block (it stays in cache): each element still adds replica 1,
    // then 2, ..., and the inner loop vectorizes.
    for (const auto& g : replica_grads_) {
      const T* src = g.data();
      for (size_t i = from; i < to; ++i) grads[i] += src[i];
    }
  };
  if (unsummed_ == Unsummed::kAll) {
    add(0, layout().dense_size());
  } else if (unsummed_ == Unsummed::kSummedRanges) {
    for (const auto& [from, to] : summed_ranges_) add(from, to);
  }
}

template <typename T>
void DataParallelModel<T>::multiply_deferred_kernels(T* grads) {
  if constexpr (std::is_same_v<T, float>) {
    std::vector<simd::ProductSegment> segments;
    for (size_t p = 0; p < deferred_.size(); ++p) {
      if (!deferred_[p]) continue;
      segments.clear();
      bool bf16 = false;
      int64_t out = 0, in = 0;
      for (const auto& replica : replicas_) {
        const typename Model<T>::KernelFactors f = replica->kernel_factors(p);
        out = f.deltas.rows();
        in = f.inputs.rows();
        bf16 = f.bf16;
        segments.push_back({{f.deltas.data(), 1, out}, {f.inputs.data(), 1, in}, f.deltas.cols()});
      }
      // The kernel, [in, out] row-major, is its gradient's [out x in] column-major matrix.
      simd::product_segments(out, in, segments, grads + layout().params()[p].offset, out, replicas(), bf16);
    }
  }
}

template <typename T>
LossResult DataParallelModel<T>::evaluate(const T* params, const T* inputs, const float* targets, int64_t batch) {
  const int n = replicas();
  share_sparse_rows();
  if (n == 1 || batch < n) return replicas_[0]->evaluate(params, inputs, targets, batch);
  std::vector<LossResult> results(static_cast<size_t>(n));
  const int64_t in = input_size();
  std::vector<std::exception_ptr> errors(static_cast<size_t>(n));  // as in compute_gradients
#pragma omp parallel for num_threads(n) schedule(static, 1)
  for (int r = 0; r < n; ++r) {
    try {
      const auto [begin, end] = slice(r, batch);
      results[static_cast<size_t>(r)] = replicas_[static_cast<size_t>(r)]->evaluate(
          params, inputs + begin * in, targets + begin * target_size(), end - begin);
    } catch (...) {
      errors[static_cast<size_t>(r)] = std::current_exception();
    }
  }
  rethrow_first(errors);
  LossResult total;
  for (const auto& r : results) {
    total += r;
  }
  return total;
}

template <typename T>
void DataParallelModel<T>::set_first_layer_row_groups(const std::vector<uint32_t>& group_of_row, uint32_t groups) {
  for (auto& replica : replicas_) replica->set_first_layer_row_groups(group_of_row, groups);
}

template <typename T>
void DataParallelModel<T>::use_first_layer_partials(std::vector<const T*> partials) {
  if (replicas_.size() != 1) throw Error("ready-made partial products need a single replica");
  replicas_.front()->use_first_layer_partials(std::move(partials));
}

template class DataParallelModel<float>;
template class DataParallelModel<double>;

}  // namespace pstrain::nn
