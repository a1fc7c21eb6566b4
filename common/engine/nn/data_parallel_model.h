// Data parallelism inside one process: R replicas of a Model, each computing the gradient of its
// slice of the batch on its own thread, summed into the caller's buffer in a fixed order (by
// compute_gradients, or by the caller with sum_into: leave_sum_to_caller).
//
// Why: on few cores, splitting the batch scales every layer (im2col, pooling, activations), where
// multi-threaded BLAS only scales the matrix products and synchronises inside each of them.
// The sum is taken in replica order, so results are reproducible for a given replica count.
// Large dense kernels of layers not on the model's input skip that sum: the replicas leave them as
// factors (Model::kernel_factors) and all threads then multiply them out together, split by blocks
// of the kernel (simd/segmented_product.h), with the bits of the per-replica products summed in
// order. (The replicas' gradient buffers keep room for them: multiply_kernels_together(false) and
// the slice callback write there.)
//
// Thread rules: one caller thread at a time; the replicas run on OpenMP threads inside calls. The
// one exception is sum_into, which several threads may call at once on disjoint ranges, while no
// other call runs.
#pragma once

#include <algorithm>
#include <functional>
#include <memory>
#include <vector>

#include "common/base/aligned.h"
#include "common/engine/nn/model.h"

namespace pstrain::nn {

template <typename T>
class DataParallelModel {
 public:
  // replicas >= 1. max_batch is the whole batch; each replica gets buffers for its share, replica
  // 0 for up to max(share, replicas - 1) examples (it evaluates a batch smaller than the replicas
  // whole; compute_gradients splits every batch as a cluster's data plan does, empty slices too).
  DataParallelModel(const ModelSpec& spec, int64_t max_batch, int replicas, const LossSpec& loss = {});

  const ParamLayout& layout() const { return replicas_.front()->layout(); }
  int64_t input_size() const { return replicas_.front()->input_size(); }
  int64_t output_size() const { return replicas_.front()->output_size(); }
  int64_t max_batch() const { return max_batch_; }
  int replicas() const { return static_cast<int>(replicas_.size()); }

  // Same contracts as Model: grads is overwritten with d(summed loss)/d(params) (with
  // leave_sum_to_caller, only once sum_into has added the replicas over every range). `ready` is
  // called during backward only with a single replica (with several, gradients are final only
  // after the final sum).
  // `factored` (Model::compute_gradients) needs a single replica: with several it must be null.
  LossResult compute_gradients(const T* params, const T* inputs, const float* targets, int64_t batch, T* grads,
                               const typename Model<T>::GradientsReady& ready = {},
                               const typename Model<T>::FactoredKernels* factored = nullptr,
                               const ExampleKeys& keys = {});
  // The same on integer class labels (tests and tools).
  LossResult compute_gradients(const T* params, const T* inputs, const int32_t* labels, int64_t batch, T* grads) {
    label_targets_.assign(labels, labels + batch);
    return compute_gradients(params, inputs, label_targets_.data(), batch, grads);
  }
  bool needs_keys() const { return replicas_.front()->needs_keys(); }
  // Called on each replica's own gradient (replica r, its buffer of the dense layout) once its
  // backward is done and before the sum, in replica order on the caller's thread: what the
  // standalone trainer uses to stand in for a cluster's compressed pushes
  // (worker/local_compression.h). Not with `ready` (its gradients would be announced before).
  using SliceGradient = std::function<void(int replica, T* grads)>;
  void set_on_slice_gradient(SliceGradient on_slice) { on_slice_ = std::move(on_slice); }
  // Model::use_bf16_products on every replica; the layers switched in one.
  typename Model<T>::Bf16Layers use_bf16_products() {
    typename Model<T>::Bf16Layers switched;
    for (auto& r : replicas_) switched = r->use_bf16_products();
    return switched;
  }
  // Model::sparse_tables and use_sparse_rows. The rows' gradients are the whole batch's: each
  // replica writes its own, summed into the given buffers in replica order (as the dense ones).
  const std::vector<SparseTable>& sparse_tables() const { return replicas_.front()->sparse_tables(); }
  void use_sparse_rows(std::span<const SparseTableRows<T>> rows) { sparse_rows_ = rows; }
  // Whether the large dense kernels not on the input are multiplied out by all threads
  // together (the default) or by each replica for its slice and then summed: the same bits either
  // way (tests and benchmarks compare the two). kernels_together() counts the kernels it applies to.
  void multiply_kernels_together(bool on) { multiply_together_ = on; }
  size_t kernels_together() const { return static_cast<size_t>(std::count(deferred_.begin(), deferred_.end(), true)); }
  // Whether compute_gradients leaves the replicas' dense gradients unsummed (off by default): the
  // caller then adds them with sum_into, block by block, before it reads `grads` (the trainer does
  // so inside its optimizer's update: optim::Optimizer::Prologue). The kernels multiplied together
  // and the sparse rows are summed either way. Not with compute_gradients' `ready`.
  void leave_sum_to_caller(bool on) { caller_sums_ = on; }
  // Adds replicas 1..R-1's dense gradients into grads[begin, end), in replica order, where the last
  // compute_gradients left them unsummed (nothing otherwise): the bits of the sum it would have
  // taken. Call it once per position and step (a second call adds again). Calls on disjoint ranges
  // may run on different threads at once.
  void sum_into(T* grads, size_t begin, size_t end) const;
  // The first replica (with one replica, the whole model: its kernel_factors).
  const Model<T>& first_replica() const { return *replicas_.front(); }
  LossResult evaluate(const T* params, const T* inputs, const float* targets, int64_t batch);
  int64_t target_size() const { return replicas_.front()->target_size(); }
  // Model::set_first_layer_row_groups on every replica.
  void set_first_layer_row_groups(const std::vector<uint32_t>& group_of_row, uint32_t groups);
  // Model::use_first_layer_partials; needs a single replica (the partials are of the whole batch).
  void use_first_layer_partials(std::vector<const T*> partials);

 private:
  // Columns [begin, end) of the batch for replica r.
  std::pair<int64_t, int64_t> slice(int r, int64_t batch) const;

  int64_t max_batch_;
  std::vector<float> label_targets_;
  std::vector<std::unique_ptr<Model<T>>> replicas_;
  // Gives each replica the step's sparse rows: replica 0 the caller's, the others theirs with
  // gradients of their own.
  void share_sparse_rows();
  // Adds the replicas' sparse gradients into the caller's, in replica order.
  void sum_sparse_gradients();
  // Replica r's gradient for an empty slice: zero, dense and sparse rows (r's buffers).
  void zero_slice(int r, T* grads);
  // Adds replicas 1..R-1's dense gradients into grads, in replica order, except the deferred
  // kernels' ranges.
  void sum_dense_gradients(T* grads);
  // Writes the deferred kernels' gradients into grads from the replicas' factors.
  void multiply_deferred_kernels(T* grads);

  // The dense kernels the replicas leave as factors (indexed by parameter), and the dense ranges
  // [begin, end) the replica sum still covers. Empty with one replica or for double.
  typename Model<T>::FactoredKernels deferred_;
  std::vector<std::pair<size_t, size_t>> summed_ranges_;
  bool multiply_together_ = true;
  bool caller_sums_ = false;
  // What the last compute_gradients left for sum_into: nothing, the summed ranges (the deferred
  // kernels are final), or the whole dense range.
  enum class Unsummed { kNone, kSummedRanges, kAll };
  Unsummed unsummed_ = Unsummed::kNone;

  std::vector<std::vector<T, CacheAlignedAllocator<T>>> replica_grads_;  // for replicas 1..R-1 (replica 0 writes the caller's buffer)
  std::span<const SparseTableRows<T>> sparse_rows_;
  SliceGradient on_slice_;
  // Replicas 1..R-1: their views of the sparse rows and their gradients, by table.
  std::vector<std::vector<SparseTableRows<T>>> replica_rows_;
  std::vector<std::vector<std::vector<T, CacheAlignedAllocator<T>>>> replica_sparse_grads_;
};

}  // namespace pstrain::nn
