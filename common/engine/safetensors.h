// The safetensors format (what PyTorch, numpy and JAX users load directly): an 8-byte
// little-endian header length, a JSON header mapping each tensor name to its dtype, shape and
// byte range, then the raw little-endian data.
//
// What pstrain writes (models, checkpoints) is float32 ("F32"), tensors named as in the layout
// ("layers.1.kernel"), in TensorFlow's shapes. A checkpoint with its optimizer adds one tensor per
// slot and parameter, "optimizer.<slot>.<parameter>" ("optimizer.m.layers.1.kernel"), and the
// update count under "__metadata__" as "optimizer_iterations". What it reads may come from
// elsewhere (numpy, PyTorch): tensors are matched by name and shape, in any order, and F64, F16
// and BF16 are converted to float32.
//
// Thread rules: pure functions.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/base/error.h"
#include "common/engine/optim/optimizer.h"
#include "common/engine/param_layout.h"

namespace pstrain {

using Metadata = std::vector<std::pair<std::string, std::string>>;

// The parameters, and optionally the optimizer's slots (each over the whole layout) and update
// count, as a safetensors file cut into consecutive pieces of at most max_piece_bytes (the header
// alone may be a piece): what the JobStore keeps, one RocksDB value each, so that no value, and
// no buffer but the parameters themselves, is the size of the model.
std::vector<std::string> encode_safetensors_pieces(const ParamLayout& layout, std::span<const float> params,
                                                   const Metadata& metadata, size_t max_piece_bytes,
                                                   const optim::OptimizerState* optimizer = nullptr);
// The header piece of such a file (its 8-byte length and JSON, padded so the data starts 8-byte
// aligned), for a file written tensor by tensor without the whole of it in memory: the parameters
// in layout order, then for each of `slots` (in order) every parameter's slot, each p.size float32
// values. `iterations`: the optimizer's update count (a checkpoint; encode_safetensors_pieces
// with an optimizer writes it), none for a file of parameters only. The data that follows it is
// byte for byte what encode_safetensors_pieces writes after its header.
std::string safetensors_header(const ParamLayout& layout, const std::vector<std::string>& slots,
                               const Metadata& metadata, std::optional<int64_t> iterations);
// The same in one string.
std::string encode_safetensors(const ParamLayout& layout, std::span<const float> params, const Metadata& metadata,
                               const optim::OptimizerState* optimizer = nullptr);

// A model file that does not fit what it is read for. `tensor` names the tensor at fault (empty
// when the file as a whole is: not safetensors, truncated).
class ModelFileError : public Error {
 public:
  ModelFileError(std::string tensor, const std::string& message) : Error(message), tensor_(std::move(tensor)) {}
  const std::string& tensor() const { return tensor_; }

 private:
  std::string tensor_;
};

// What a file holds for a layout.
struct ModelState {
  std::vector<float> params;                       // laid out by the layout, zeros in its padding
  std::optional<optim::OptimizerState> optimizer;  // when the file has every slot for every parameter
  std::map<std::string, std::string> metadata;     // "__metadata__"'s string entries
};

// Reads a file against `layout`: every parameter by name and shape; optimizer slots named
// `slots` (the optimizer's, in its order; empty: none are read) when the file has them all.
// Throws ModelFileError naming the tensor: missing, of another shape, of an unknown dtype, out of
// the file's bounds, or not a parameter of the model (nor an optimizer slot of one).
ModelState decode_model_state(const ParamLayout& layout, std::string_view file,
                              const std::vector<std::string>& slots = {});
// The parameters of a file for `layout` (decode_model_state without slots), or nullopt if it does
// not fit.
std::optional<std::vector<float>> decode_safetensors(const ParamLayout& layout, std::string_view file);
// The string entries of a file's "__metadata__" (empty if it has none); nullopt if the header is
// not a safetensors header.
std::optional<std::map<std::string, std::string>> safetensors_metadata(std::string_view file);

// What a file holds, whatever model it is for: each tensor's name, dtype and shape (in name
// order) and the metadata. Reads every value: throws ModelFileError naming the tensor for any
// defect decode_model_state would find in it (dtype, shape, bounds) and for a value that is not a
// finite float32 once converted (NaN, infinity, an F64 beyond float32's range).
struct SafetensorsTensor {
  std::string name, dtype;
  Shape shape;
};
struct SafetensorsContents {
  std::vector<SafetensorsTensor> tensors;
  std::map<std::string, std::string> metadata;
};
SafetensorsContents inspect_safetensors(std::string_view file);

// The name of slot `slot` of parameter `param` in a checkpoint file.
std::string optimizer_tensor_name(const std::string& slot, const std::string& param);

}  // namespace pstrain
