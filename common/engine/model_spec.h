// The model part of a job spec, as typed structs, and the checks that need no math:
// shape inference and the parameter layout.
//
// Errors are SpecError with a JSON pointer into the job spec ("/model/layers/2/units").
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/engine/param_layout.h"

namespace pstrain {

enum class LayerType {
  kDense, kConv2D, kMaxPool2D, kFlatten, kReshape, kReLU, kActivation,
  kAvgPool2D, kGlobalAvgPool2D, kGlobalMaxPool2D, kLayerNorm,
  kAdd, kConcatenate, kDotInteraction,  // merge layers: two or more inputs (nn/merge.h)
  kDropout, kBatchNorm,
  kRandomFlip, kRandomCrop, kRandomTranslation,  // augmentation (nn/augmentation.h)
  kEmbedding,
  kSlice,  // features [begin, begin + size) of a flat input (nn/slice.h)
  // Sequences ([steps, channels]): the 2-D layers over a [1, steps, channels] image (the same
  // memory), their windows {1, k} (is_sequence_layer, as_image).
  kConv1D, kMaxPool1D, kAvgPool1D, kGlobalAvgPool1D, kGlobalMaxPool1D,
  kLstm, kGru,  // recurrent layers over [steps, channels] (nn/recurrent.h)
  // Over [steps, channels] (nn/attention.h): self-attention, and learned positions added to a sequence.
  kMultiHeadAttention, kPositionEmbedding,
};
// Keras' activations (common/engine/nn/activations.h has the formulas).
enum class Activation { kLinear, kReLU, kSigmoid, kTanh, kSoftmax, kGelu, kElu, kLeakyReLU, kSwish };
// TensorFlow's padding: kValid uses only whole windows; kSame pads so that out = ceil(in / stride),
// splitting the padding with the extra row or column on the bottom/right.
enum class Padding { kValid, kSame };

// The loss a model is trained with (the job spec's `loss`). On integer class labels:
//   sparse_softmax_cross_entropy       softmax over the outputs, the label's -log p (the default;
//                                      Keras' sparse_categorical_crossentropy)
//   categorical_cross_entropy          the same against a one-hot target smoothed by
//                                      label_smoothing: (1 - s) onehot + s / classes
//   binary_cross_entropy               one logit per label: sigmoid, labels 0 or 1 (or, from a
//                                      dataset of float targets, one in [0, 1] per output:
//                                      multi-label), smoothed to y (1 - s) + s / 2
// On float targets (regression: one target per output), Keras' means over the outputs:
//   mean_squared_error                 mean (z - y)^2
//   mean_absolute_error                mean |z - y|
//   huber                              mean of 0.5 e^2 where |e| <= delta, else delta (|e| - delta / 2)
// (common/engine/nn/loss.h has the formulas.)
enum class LossType {
  kSparseCategoricalCrossEntropy, kCategoricalCrossEntropy, kBinaryCrossEntropy,
  kMeanSquaredError, kMeanAbsoluteError, kHuber,
};
struct LossSpec {
  LossType type = LossType::kSparseCategoricalCrossEntropy;
  float label_smoothing = 0.0f;  // categorical and binary only, in [0, 1]
  float delta = 1.0f;            // huber only, > 0
  // Class losses: each example's loss term (and its gradient) times its label's weight, one per
  // class index (loss_classes of them), Keras' fit(class_weight) under the sum-over-batch
  // reduction: the weighted sum is still divided by the global batch. Empty: every example
  // weighs 1. Training only; evaluation figures are unweighted (compute_loss's LossWeights).
  // Filled from the job spec's training.class_weight once resolved (common/data/class_weight.h).
  std::vector<float> class_weights;
};
// True for the losses on float targets (mean_squared_error, mean_absolute_error, huber).
inline bool is_regression(const LossSpec& loss) {
  return loss.type == LossType::kMeanSquaredError || loss.type == LossType::kMeanAbsoluteError ||
         loss.type == LossType::kHuber;
}
// Target values per example for a model of `outputs` outputs: one per output for regression and
// binary cross-entropy (one label per output: multi-label when there are several; a class label 0
// or 1 of a one-output model is its one target), else 1 (the class index).
inline int64_t target_size(const LossSpec& loss, int64_t outputs) {
  return is_regression(loss) || loss.type == LossType::kBinaryCrossEntropy ? outputs : 1;
}
const char* loss_type_name(LossType type);
// The outputs a model needs for `classes` classes under `loss`: 1 for binary, else one per class.
int64_t loss_outputs(const LossSpec& loss, uint32_t classes);

const char* layer_type_name(LayerType type);
const char* activation_name(Activation activation);
const char* padding_name(Padding padding);

enum class Combiner { kNone, kSum, kMean };

struct LayerSpec {
  LayerType type = LayerType::kDense;
  // The layer graph (Keras' functional API): a layer may have a name, and may name its inputs
  // (other layers' names, or "input" for the model's input). Without inputs a layer reads the
  // previous layer in the list (the first one the model's input), so a chain needs no names.
  // An unnamed layer is known by its index ("3"); names are 1-64 of [A-Za-z0-9_-], not all digits
  // and not "input".
  std::string name;
  std::vector<std::string> inputs;
  int64_t units = 0;                    // dense
  int64_t filters = 0;                  // conv2d
  std::array<int64_t, 2> kernel_size{}; // conv2d: height, width
  Padding padding = Padding::kValid;    // conv2d
  bool use_bias = true;                 // conv2d
  // conv2d: Keras' dilation_rate, height, width (>= 1): the kernel reads every d-th input, so it
  // covers (k - 1) d + 1 positions per axis. Above 1 the strides must be 1 (as in Keras).
  std::array<int64_t, 2> dilation_rate{1, 1};
  std::array<int64_t, 2> pool_size{2, 2};  // maxpool2d, avgpool2d: height, width
  // conv2d, maxpool2d, avgpool2d: height, width; absent means the layer's default (layer_strides()).
  std::optional<std::array<int64_t, 2>> strides;
  Shape target_shape;                   // reshape (one entry may be -1)
  // dense, conv2d, activation. The model's output is its logits: a softmax on the last layer is
  // the loss's own (Keras' softmax output with a cross-entropy loss), not a stage of the model.
  Activation activation = Activation::kLinear;
  float l2 = 0.0f;                      // dense, conv2d: kernel L2 factor
  float epsilon = 1e-3f;                // layer_norm, batch_norm (Keras' default)
  bool center = true, scale = true;     // layer_norm, batch_norm: beta, gamma
  float momentum = 0.99f;               // batch_norm: of the moving statistics
  // batch_norm: examples per ghost batch; 0 until the job is submitted, which sets the default,
  // the global batch divided by the workers (job_spec.h).
  int64_t virtual_batch_size = 0;
  bool flip_horizontal = true, flip_vertical = false;  // random_flip: `mode`
  int64_t crop_padding = 0;                             // random_crop: `padding`
  float height_factor = 0.0f, width_factor = 0.0f;      // random_translation
  int64_t input_dim = 0, output_dim = 0;                // embedding: ids 0..input_dim-1, vectors
  // embedding: a sparse table (docs/DESIGN-NOTES.md "Sparse models"): a step reads and updates
  // only the rows its batch touches. The spec's default: sparse when the table holds more than
  // kSparseTableDefault parameters.
  bool sparse = false;
  // embedding: how an example's ids become one vector (Keras-style `combiner`, TF's
  // embedding_lookup_sparse): none gives a row per id ([n, output_dim]); sum and mean give one
  // [output_dim] vector, the rows of the ids at or above 0 summed in input order (mean: divided by
  // their count; none at all: zeros). A negative id is padding (a multi-valued column's unused
  // places), which only a combiner accepts.
  Combiner combiner = Combiner::kNone;
  // embedding (no combiner): id 0 is padding (Keras' mask_zero): the layers after it that take a
  // mask (lstm, gru, global_avgpool1d, global_maxpool1d) skip its steps; element-wise layers and
  // a recurrent layer's every-step output pass the mask on, the others drop it (nn/model.cc).
  bool mask_zero = false;
  int64_t begin = 0, size = 0;                          // slice: the features [begin, begin + size)
  float rate = 0.0f;                    // dropout (and multi_head_attention's "dropout"): the fraction dropped in training, [0, 1)
  bool self_interaction = false;        // dot_interaction: each input's dot with itself too
  // lstm, gru (`units` their state): every step's state ([steps, units]) instead of the last's;
  // both directions, concatenated (Keras' Bidirectional, merge_mode "concat": 2 units).
  bool return_sequences = false, bidirectional = false;
  // multi_head_attention (Keras' MultiHeadAttention called on one sequence as query, key and
  // value): heads, the query/key width per head, the value width per head (0: key_dim), and
  // use_causal_mask (step i attends to steps <= i). use_bias as conv2d. The output has the input's
  // channels.
  int64_t num_heads = 0, key_dim = 0, value_dim = 0;
  bool use_causal_mask = false;
};

struct ModelSpec {
  Shape input_shape;  // without the batch dimension, e.g. [28, 28, 1]
  uint64_t seed = 0;  // initialisation seed
  std::vector<LayerSpec> layers;
};

// The model's layer graph, resolved: each layer's inputs as list indices (kModelInput for the
// model's input) and an evaluation order (inputs before the layers that read them; list order
// where the graph leaves a choice). The model's output is the last layer listed; every other layer
// feeds some layer.
inline constexpr int kModelInput = -1;
struct ModelGraph {
  std::vector<std::vector<int>> inputs;  // by list index
  std::vector<size_t> order;
};
// Throws SpecError for an unknown or duplicate name, a cycle (naming it), a layer whose output
// nobody reads, or a wrong number of inputs.
ModelGraph model_graph(const ModelSpec& spec);

// The name that identifies layer i: its own, else its index. Parameters are named
// "layers.<key>.kernel" and so on.
std::string layer_key(const ModelSpec& spec, size_t i);

// Upper bounds that keep a spec from asking for absurd memory.
inline constexpr int64_t kMaxParameters = int64_t{1} << 28;        // 1 GiB of float32, sparse tables aside
inline constexpr int64_t kMaxSparseParameters = int64_t{1} << 32;  // 16 GiB of float32 in sparse tables
// An embedding table of more parameters than this is sparse unless the spec says otherwise, and
// its rows cannot have the dense update semantics (optimizer.sparse_updates).
inline constexpr int64_t kSparseTableDefault = int64_t{1} << 24;
inline constexpr int64_t kMaxActivationsPerExample = int64_t{1} << 24;

// The 1-D layers (conv1d, maxpool1d, avgpool1d, global_maxpool1d, global_avgpool1d) are the 2-D
// ones over a sequence seen as a one-row image: a [steps, channels] value is the [1, steps,
// channels] image, their kernel_size / pool_size / strides / dilation_rate are {1, k}, and a
// conv1d's kernel [k, in, filters] is the conv2d kernel [1, k, in, filters] (Keras' Conv1D names
// and layout). as_2d gives the 2-D layer type; as_image the image shape of a sequence.
bool is_sequence_layer(LayerType type);
LayerType as_2d(LayerType type);
inline Shape as_image(const Shape& sequence) { return {1, sequence[0], sequence[1]}; }

// Sequence masks (an embedding's mask_zero): for each layer (list index), the masking embedding
// whose ids mask its output's steps, or kNoMaskSource. A masking embedding sets it; the layers that
// keep their input's steps pass it on (keeps_sequence_mask: element-wise layers, attention,
// position_embedding, a dense over a sequence, a recurrent layer's every-step output), add passes on its inputs' one mask
// (an input without counts as unmasked, Keras' AND; two different ones give none); the rest drop
// it. takes_sequence_mask: the layers that read one (lstm, gru, attention, 1-D global pools).
inline constexpr int kNoMaskSource = -1;
bool takes_sequence_mask(LayerType type);
bool keeps_sequence_mask(const LayerSpec& layer);
std::vector<int> mask_sources(const ModelSpec& spec, const ModelGraph& graph);

// The strides a conv2d or pooling layer uses: as given, else Keras' default (default_strides:
// conv2d 1, maxpool2d and avgpool2d their pool_size).
std::array<int64_t, 2> layer_strides(const LayerSpec& layer);
std::array<int64_t, 2> default_strides(const LayerSpec& layer);

// One spatial axis of a sliding window (conv2d kernel, maxpool2d pool) under TensorFlow's rules:
// valid: out = floor((in - window) / stride) + 1, no padding (needs window <= in);
// same: out = ceil(in / stride), padding max((out - 1) * stride + window - in, 0) of which
// pad_before = half rounded down (the extra goes after).
struct WindowAxis {
  int64_t out = 0;
  int64_t pad_before = 0;
};
WindowAxis window_axis(int64_t in, int64_t window, int64_t stride, Padding padding);
// The input positions a kernel of k taps dilated by d covers along one axis: (k - 1) d + 1.
inline int64_t dilated_extent(int64_t k, int64_t d) { return (k - 1) * d + 1; }

// Output shape of every layer (index i: output of layers[i]); throws SpecError naming the layer
// index and field when a layer does not fit its input (model_graph's errors included).
std::vector<Shape> infer_shapes(const ModelSpec& spec);

// Tensors of the model in a fixed order: for each layer with parameters in the graph's evaluation
// order, its kernel then bias, named "layers.<key>.kernel" / "layers.<key>.bias" (layer_key);
// then the sparse embedding tables, in the same order (ParamLayout::dense_size() ends before them).
ParamLayout make_param_layout(const ModelSpec& spec);

// The features of the model's input that a sparse embedding (layer `layer`) reads as its ids:
// [begin, begin + size). Throws SpecError unless its input is the model's input or a slice of it
// (through slice, flatten and reshape layers): a step's rows are known from its batch alone.
struct IdColumns {
  int64_t begin = 0, size = 0;
};
IdColumns sparse_id_columns(const ModelSpec& spec, const ModelGraph& graph, size_t layer);

}  // namespace pstrain
