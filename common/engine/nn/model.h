// A model built from a ModelSpec: the layer stack, its parameter layout and the scratch buffers
// for a maximum batch size.
//
// The model owns no parameters: callers pass the flat parameter buffer (a worker's pulled copy,
// the trainer's own) and a flat gradient buffer, both laid out by layout(). A step allocates
// nothing. Gradients are those of the loss summed over the batch; scaling by the batch size and
// L2 regularisation happen once per step elsewhere (gradient_scaling.h), because in distributed
// training they belong to the server.
//
// Thread rules: one thread at a time (the buffers are the model's own).
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "common/engine/model_spec.h"
#include "common/engine/nn/dropout.h"
#include "common/engine/nn/layer.h"
#include "common/engine/nn/loss.h"
#include "common/engine/nn/sparse_rows.h"

namespace pstrain::nn {

template <typename T>
class Dense;
template <typename T>
class Merge;
template <typename T>
class BatchNorm;
template <typename T>
class Augmentation;
template <typename T>
class Embedding;

template <typename T>
class Model {
 public:
  // Throws SpecError if the spec does not describe a valid model. `loss`: what evaluate and
  // compute_gradients score the outputs with (loss.h).
  Model(const ModelSpec& spec, int64_t max_batch, const LossSpec& loss = {});
  ~Model();
  Model(const Model&) = delete;
  Model& operator=(const Model&) = delete;

  const ParamLayout& layout() const { return layout_; }
  int64_t input_size() const { return input_size_; }
  int64_t output_size() const { return output_size_; }
  int64_t max_batch() const { return max_batch_; }
  const LossSpec& loss() const { return loss_; }
  // Target values per example (loss.h): 1 (the class) under the class losses, else output_size().
  int64_t target_size() const { return pstrain::target_size(loss_, output_size_); }

  // inputs: input_size x batch, column-major. Returns the logits (output_size x batch), valid
  // until the next call. Inference: dropout passes everything through.
  ConstMatMap<T> forward(const T* params, const T* inputs, int64_t batch);

  // Loss and accuracy only: of inference (evaluation), or with `keys` of training as
  // compute_gradients sees it (dropout on, batch_norm on its batches' statistics; for gradient
  // checks; the loss's class weights apply only then, as in training).
  // `targets`: target_size() floats per example (loss.h).
  LossResult evaluate(const T* params, const T* inputs, const float* targets, int64_t batch,
                      const ExampleKeys& keys = {});
  // The same on integer class labels (tests and tools; the class losses only).
  LossResult evaluate(const T* params, const T* inputs, const int32_t* labels, int64_t batch,
                      const ExampleKeys& keys = {}) {
    return evaluate(params, inputs, label_targets(labels, batch), batch, keys);
  }

  // The sparse embedding tables (sparse_rows.h), in layout order, and the rows of each for the
  // passes that follow (one view per table, kept by reference: the caller keeps them valid and
  // current, and sets them again when they move). Without them, forward passes read the whole
  // tables from the flat parameters (a model file's), and compute_gradients fails.
  const std::vector<SparseTable>& sparse_tables() const { return sparse_tables_; }
  void use_sparse_rows(std::span<const SparseTableRows<T>> rows) { sparse_rows_ = rows; }

  // Mixed precision (the job spec's `precision`): every convolution (conv2d, conv1d, a dense over
  // a sequence) that runs on oneDNN computes its products in bfloat16
  // (Conv2D::Method::kOneDnnBf16), and every dense layer its forward and input-gradient products
  // (Dense::use_bf16). Returns how many layers of each it switched (none for T = double).
  // Needs onednn_bf16(); call it before the first step.
  struct Bf16Layers {
    int convolutions = 0, dense = 0;
    int one_channel = 0;  // convolutions left float32: the one-channel method (layers.h)
  };
  Bf16Layers use_bf16_products();
  // After use_bf16_products: the parameters (indices into layout().params()) this model reads only
  // rounded by bf16_round (common/engine/simd/bf16_product.h), in its forward, backward and
  // evaluation alike: the kernels of the bfloat16 convolutions and of the bfloat16 dense layers
  // that are not a data input (whose sparse-input and row-group forwards read float32). Those
  // values rounded beforehand give the same bits (rounding twice is rounding once), so a worker
  // takes them from the servers in bfloat16 (PushParams.replyBfloat16). Empty in float32.
  std::vector<size_t> rounded_kernels() const;

  // True if training needs the examples' keys (the model has dropout or augmentation).
  bool needs_keys() const { return !keyed_.empty(); }

  // Called during backward each time the gradient from some flat offset to the end of the buffer
  // is final (backward runs from the last layer to the first, and tensors are laid out in layer
  // order), so a caller can ship those gradients while the earlier layers are still computing.
  using GradientsReady = std::function<void(size_t final_from_offset)>;

  // Dense kernels whose gradient the caller takes as factors (kernel_factors) instead of in
  // `grads`: indexed by parameter (layout().params()); true only for dense kernels.
  using FactoredKernels = std::vector<bool>;

  // Forward and backward: overwrites all of `grads` with d(summed loss)/d(params), except the
  // slices of the kernels `factored` marks, which it leaves as they are.
  // `keys`: the batch's epoch and example indices, required when needs_keys() (dropout draws
  // from them).
  LossResult compute_gradients(const T* params, const T* inputs, const float* targets, int64_t batch,
                               T* grads, const GradientsReady& ready = {}, const FactoredKernels* factored = nullptr,
                               const ExampleKeys& keys = {});
  LossResult compute_gradients(const T* params, const T* inputs, const int32_t* labels, int64_t batch,
                               T* grads, const GradientsReady& ready = {}, const FactoredKernels* factored = nullptr,
                               const ExampleKeys& keys = {}) {
    return compute_gradients(params, inputs, label_targets(labels, batch), batch, grads, ready, factored, keys);
  }
  // Integer class labels as float targets, in a buffer of the model's (valid until the next call).
  const float* label_targets(const int32_t* labels, int64_t batch) {
    label_targets_.assign(labels, labels + batch);
    return label_targets_.data();
  }

  // True if parameter `param` is the kernel of a dense layer (one that can be factored).
  bool is_dense_kernel(size_t param) const;
  // True if parameter `param` is the kernel of a dense layer that reads the model's input (whose
  // backward skips the features a batch leaves at zero: layers.h, "Sparse inputs").
  bool is_input_dense_kernel(size_t param) const;
  // A dense kernel's gradient of the last compute_gradients as two factors: the layer's input
  // (in x batch) and the gradient of its output before the activation (out x batch). The kernel's
  // gradient, read column-major as [out x in] (the row-major [in, out] kernel), is
  // deltas * inputs^T, by simd::product_bf16 when `bf16` (mixed precision's layers) and else by
  // simd::product, as the layer's own backward computes it. Views into the model's buffers: valid
  // until the next forward pass.
  struct KernelFactors {
    ConstMatMap<T> inputs, deltas;
    bool bf16 = false;
  };
  KernelFactors kernel_factors(size_t param) const;

  // The layout index of the first layer's kernel when that layer is dense and reads the input
  // (the one row groups apply to), else -1.
  int first_layer_kernel() const;
  // Row groups of that layer (Dense::set_row_groups, row_groups.h). Throws if there is none.
  void set_first_layer_row_groups(std::vector<uint32_t> group_of_row, uint32_t groups);
  // Ready-made partial products for the next forward only (Dense::use_partials).
  void use_first_layer_partials(std::vector<const T*> partials);

 private:
  static constexpr int kNoMask = -2;
  // One step of the evaluation order: a layer (one input) or a merge (several). Buffers index
  // activations_ / deltas_; kModelInput is the model's input.
  struct Stage {
    std::unique_ptr<Layer<T>> layer;
    std::unique_ptr<Merge<T>> merge;
    int64_t in_size, out_size;  // in_size: a layer's (a merge asks merge->input_size)
    std::vector<int> inputs;
    int output_buffer;
    size_t first_param_offset;  // offset of this stage's first tensor (or of the next one's)
    int kernel_param;           // index of its kernel in the layout, -1 if none
    Dense<T>* dense;            // the layer, if it is dense (else nullptr)
    int mask_ids = kNoMask;     // the buffer of ids whose zeros mask its input's steps (use_mask)
  };
  const Stage& dense_stage(size_t param) const;
  // training: dropout draws from `keys`, batch_norm normalizes with its ghost batches' statistics.
  ConstMatMap<T> run_forward(const T* params, const T* inputs, int64_t batch, const ExampleKeys& keys, bool training);
  const T* values(int buffer) const { return buffer == kModelInput ? last_input_ : activations_[buffer].data(); }
  // Where a stage writes dLoss/d(its input `buffer`): the buffer's delta when it is the first
  // reader to write it in this backward pass, else scratch_, which add_delta then sums in.
  T* delta_target(int buffer);
  void add_delta(int buffer, const T* written, int64_t size, int64_t batch);

  ParamLayout layout_;
  std::vector<float> label_targets_;
  LossSpec loss_;
  int64_t max_batch_;
  int64_t input_size_ = 0, output_size_ = 0;
  std::vector<Stage> stages_;
  std::vector<Mat<T>> activations_;  // one per stage output
  std::vector<Mat<T>> deltas_;       // dLoss/d(activation), same shapes
  std::vector<bool> delta_written_;  // by buffer, during one backward pass
  Mat<T> scratch_;                   // a second reader's gradient, before it is summed in
  int output_buffer_ = 0;
  // The layers that draw from the examples' keys (dropout, augmentation, attention's dropout):
  // each one's set_keys.
  std::vector<std::function<void(const ExampleKeys&)>> keyed_;
  std::vector<BatchNorm<T>*> batch_norms_;
  std::vector<SparseTable> sparse_tables_;
  std::vector<Embedding<T>*> sparse_embeddings_;  // by sparse table
  std::span<const SparseTableRows<T>> sparse_rows_;
  const T* last_input_ = nullptr;
  int64_t last_batch_ = 0;
};

}  // namespace pstrain::nn
