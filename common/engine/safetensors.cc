#include "common/engine/safetensors.h"

#include <boost/json.hpp>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <set>

#include "common/base/json_parse.h"
#include "common/base/json_text.h"

namespace pstrain {

namespace {

static_assert(std::endian::native == std::endian::little, "safetensors data is little-endian");

// One tensor to write: its name, shape and float32 values (somewhere in memory).
struct TensorRef {
  std::string name;
  Shape shape;
  const float* data = nullptr;
  size_t size = 0;
};

std::vector<TensorRef> tensors_of(const ParamLayout& layout, std::span<const float> params,
                                  const optim::OptimizerState* optimizer) {
  std::vector<TensorRef> out;
  for (const ParamInfo& p : layout.params()) out.push_back({p.name, p.shape, params.data() + p.offset, p.size});
  if (optimizer != nullptr) {
    for (const optim::Slot& slot : optimizer->slots) {
      if (slot.values.size() < layout.total_size()) throw Error("optimizer slot '" + slot.name + "' is too short");
      for (const ParamInfo& p : layout.params()) {
        out.push_back({optimizer_tensor_name(slot.name, p.name), p.shape, slot.values.data() + p.offset, p.size});
      }
    }
  }
  return out;
}

// The 8-byte length and the JSON header, padded with spaces so the data starts 8-byte aligned
// (allowed by the format, expected by loaders that map the file).
std::string header(const std::vector<TensorRef>& tensors, const Metadata& metadata) {
  namespace json = boost::json;
  json::object header;
  json::object meta;
  for (const auto& [k, v] : metadata) meta[k] = v;
  header["__metadata__"] = std::move(meta);
  size_t offset = 0;
  for (const TensorRef& t : tensors) {
    json::array shape;
    for (int64_t d : t.shape) shape.push_back(d);
    const size_t bytes = t.size * sizeof(float);
    header[t.name] = json::object{{"dtype", "F32"}, {"shape", std::move(shape)},
                                  {"data_offsets", json::array{offset, offset + bytes}}};
    offset += bytes;
  }
  std::string text = to_json_text(header);
  while ((text.size() + 8) % 8 != 0) text.push_back(' ');
  const uint64_t n = text.size();
  std::string out(8, '\0');
  std::memcpy(out.data(), &n, 8);
  return out + text;
}

float half_to_float(uint16_t h) {
  const uint32_t sign = (h >> 15) & 1u, exponent = (h >> 10) & 0x1fu, mantissa = h & 0x3ffu;
  float value = 0;
  if (exponent == 0) {
    value = std::ldexp(static_cast<float>(mantissa), -24);
  } else if (exponent == 31) {
    value = mantissa == 0 ? INFINITY : NAN;
  } else {
    value = std::ldexp(static_cast<float>(mantissa | 0x400u), static_cast<int>(exponent) - 25);
  }
  return sign != 0 ? -value : value;
}

size_t dtype_bytes(std::string_view dtype) {
  if (dtype == "F32") return 4;
  if (dtype == "F64") return 8;
  if (dtype == "F16" || dtype == "BF16") return 2;
  return 0;
}

// Copies n elements of `dtype` at `data` into out as float32.
void convert(std::string_view dtype, const char* data, size_t n, float* out) {
  // A tensor of no elements: `out` may be null (an empty vector's data()), and memcpy must not
  // see a null pointer even for 0 bytes (found by fuzz/safetensors_fuzz.cc under UBSan).
  if (n == 0) return;
  if (dtype == "F32") {
    std::memcpy(out, data, n * 4);
  } else if (dtype == "F64") {
    for (size_t i = 0; i < n; ++i) {
      double d = 0;
      std::memcpy(&d, data + 8 * i, 8);
      out[i] = static_cast<float>(d);
    }
  } else if (dtype == "F16") {
    for (size_t i = 0; i < n; ++i) {
      uint16_t h = 0;
      std::memcpy(&h, data + 2 * i, 2);
      out[i] = half_to_float(h);
    }
  } else {  // BF16: the upper half of a float32
    for (size_t i = 0; i < n; ++i) {
      uint16_t h = 0;
      std::memcpy(&h, data + 2 * i, 2);
      const uint32_t bits = uint32_t{h} << 16;
      std::memcpy(out + i, &bits, 4);
    }
  }
}

struct StoredTensor {
  std::string dtype;
  Shape shape;
  size_t begin = 0, end = 0;  // in the data section
};

struct ParsedFile {
  std::map<std::string, StoredTensor> tensors;
  std::map<std::string, std::string> metadata;
  std::string_view data;
};

ParsedFile parse(std::string_view file) {
  namespace json = boost::json;
  uint64_t n = 0;
  if (file.size() < 8) throw ModelFileError("", "not a safetensors file: shorter than its 8-byte header length");
  std::memcpy(&n, file.data(), 8);
  if (n > file.size() - 8 || n > (uint64_t{100} << 20)) {
    throw ModelFileError("", "not a safetensors file: its header length (" + std::to_string(n) +
                                 " bytes) is past the end of the file (" + std::to_string(file.size()) + " bytes)");
  }
  boost::system::error_code ec;
  const json::value header = parse_json(file.substr(8, n), ec);
  if (ec || !header.is_object()) throw ModelFileError("", "not a safetensors file: its header is not a JSON object");
  ParsedFile out;
  out.data = file.substr(8 + n);
  for (const auto& [key, value] : header.as_object()) {
    const std::string name(key);
    if (name == "__metadata__") {
      if (!value.is_object()) throw ModelFileError("", "__metadata__ is not an object");
      for (const auto& [k, v] : value.as_object()) {
        if (v.is_string()) out.metadata[std::string(k)] = std::string(v.as_string());
      }
      continue;
    }
    const json::object* t = value.if_object();
    const json::value* dtype = t != nullptr ? t->if_contains("dtype") : nullptr;
    const json::value* shape = t != nullptr ? t->if_contains("shape") : nullptr;
    const json::value* offsets = t != nullptr ? t->if_contains("data_offsets") : nullptr;
    if (dtype == nullptr || !dtype->is_string() || shape == nullptr || !shape->is_array() || offsets == nullptr ||
        !offsets->is_array() || offsets->as_array().size() != 2) {
      throw ModelFileError(name, "tensor '" + name + "' has no dtype, shape or data_offsets in the header");
    }
    StoredTensor s;
    s.dtype = std::string(dtype->as_string());
    const size_t element = dtype_bytes(s.dtype);
    if (element == 0) {
      throw ModelFileError(name, "tensor '" + name + "' is " + s.dtype + "; F32, F64, F16 and BF16 can be read");
    }
    uint64_t elements = 1;
    for (const json::value& d : shape->as_array()) {
      if (!d.is_int64() || d.as_int64() < 0 || d.as_int64() > (int64_t{1} << 40)) {
        throw ModelFileError(name, "tensor '" + name + "' has a malformed shape");
      }
      s.shape.push_back(d.as_int64());
      elements *= static_cast<uint64_t>(d.as_int64());
      if (elements > (uint64_t{1} << 40)) throw ModelFileError(name, "tensor '" + name + "' is absurdly large");
    }
    // Offsets are whole numbers of bytes: a fraction or a negative number is malformed (and
    // to_number would throw something else than a ModelFileError for them).
    const json::array& o = offsets->as_array();
    const auto offset = [&](const json::value& v) -> size_t {
      if (v.is_uint64()) return v.as_uint64();
      if (v.is_int64() && v.as_int64() >= 0) return static_cast<size_t>(v.as_int64());
      throw ModelFileError(name, "tensor '" + name + "' has malformed data_offsets");
    };
    s.begin = offset(o[0]);
    s.end = offset(o[1]);
    if (s.begin > s.end || s.end > out.data.size() || s.end - s.begin != elements * element) {
      throw ModelFileError(name, "tensor '" + name + "': data_offsets [" + std::to_string(s.begin) + ", " +
                                     std::to_string(s.end) + "] do not hold its " + std::to_string(elements) + " " +
                                     s.dtype + " values inside the file's " + std::to_string(out.data.size()) +
                                     " data bytes");
    }
    out.tensors.emplace(name, std::move(s));
  }
  return out;
}

// Reads tensor `name` of the file into out (p.size floats), checking its shape against p's.
void read_tensor(const ParsedFile& file, const std::string& name, const ParamInfo& p, float* out) {
  const auto it = file.tensors.find(name);
  if (it == file.tensors.end()) throw ModelFileError(name, "tensor '" + name + "' is missing from the file");
  const StoredTensor& s = it->second;
  if (s.shape != p.shape) {
    throw ModelFileError(name, "tensor '" + name + "' has shape " + shape_string(s.shape) + "; the model's is " +
                                   shape_string(p.shape));
  }
  convert(s.dtype, file.data.data() + s.begin, p.size, out);
}

}  // namespace

std::string optimizer_tensor_name(const std::string& slot, const std::string& param) {
  return "optimizer." + slot + "." + param;
}

std::vector<std::string> encode_safetensors_pieces(const ParamLayout& layout, std::span<const float> params,
                                                   const Metadata& metadata, size_t max_piece_bytes,
                                                   const optim::OptimizerState* optimizer) {
  const std::vector<TensorRef> tensors = tensors_of(layout, params, optimizer);
  Metadata meta = metadata;
  if (optimizer != nullptr) meta.emplace_back("optimizer_iterations", std::to_string(optimizer->iterations));
  std::vector<std::string> pieces{header(tensors, meta)};
  for (const TensorRef& t : tensors) {
    const char* data = reinterpret_cast<const char*>(t.data);
    size_t left = t.size * sizeof(float);
    while (left > 0) {
      if (pieces.back().size() >= max_piece_bytes) pieces.emplace_back();
      std::string& piece = pieces.back();
      if (piece.capacity() < max_piece_bytes && max_piece_bytes != SIZE_MAX) piece.reserve(max_piece_bytes);
      const size_t n = std::min(left, max_piece_bytes - piece.size());
      piece.append(data, n);
      data += n;
      left -= n;
    }
  }
  for (std::string& piece : pieces) piece.shrink_to_fit();
  return pieces;
}

std::string safetensors_header(const ParamLayout& layout, const std::vector<std::string>& slots,
                               const Metadata& metadata, std::optional<int64_t> iterations) {
  std::vector<TensorRef> tensors;
  for (const ParamInfo& p : layout.params()) tensors.push_back({p.name, p.shape, nullptr, p.size});
  for (const std::string& slot : slots) {
    for (const ParamInfo& p : layout.params()) tensors.push_back({optimizer_tensor_name(slot, p.name), p.shape, nullptr, p.size});
  }
  Metadata meta = metadata;
  if (iterations) meta.emplace_back("optimizer_iterations", std::to_string(*iterations));
  return header(tensors, meta);
}

std::string encode_safetensors(const ParamLayout& layout, std::span<const float> params, const Metadata& metadata,
                               const optim::OptimizerState* optimizer) {
  std::string out;
  for (const std::string& piece : encode_safetensors_pieces(layout, params, metadata, SIZE_MAX, optimizer)) out += piece;
  return out;
}

ModelState decode_model_state(const ParamLayout& layout, std::string_view file, const std::vector<std::string>& slots) {
  const ParsedFile parsed = parse(file);
  ModelState state;
  state.metadata = parsed.metadata;
  state.params.assign(layout.total_size(), 0.0f);
  std::set<std::string> known;
  for (const ParamInfo& p : layout.params()) {
    read_tensor(parsed, p.name, p, state.params.data() + p.offset);
    known.insert(p.name);
  }
  // The optimizer's slots: all of them, or none (a file of parameters only).
  bool any_slot = false, all_slots = !slots.empty();
  for (const std::string& slot : slots) {
    for (const ParamInfo& p : layout.params()) {
      const bool present = parsed.tensors.count(optimizer_tensor_name(slot, p.name)) != 0;
      any_slot = any_slot || present;
      all_slots = all_slots && present;
    }
  }
  if (any_slot && !all_slots) {
    for (const std::string& slot : slots) {
      for (const ParamInfo& p : layout.params()) {
        const std::string name = optimizer_tensor_name(slot, p.name);
        if (parsed.tensors.count(name) == 0) {
          throw ModelFileError(name, "tensor '" + name + "' is missing: the file has some of the optimizer's slots, not all");
        }
      }
    }
  }
  if (all_slots) {
    optim::OptimizerState optimizer;
    for (const std::string& slot : slots) {
      optim::Slot s{slot, std::vector<float>(layout.total_size(), 0.0f)};
      for (const ParamInfo& p : layout.params()) {
        const std::string name = optimizer_tensor_name(slot, p.name);
        read_tensor(parsed, name, p, s.values.data() + p.offset);
        known.insert(name);
      }
      optimizer.slots.push_back(std::move(s));
    }
    if (const auto it = parsed.metadata.find("optimizer_iterations"); it != parsed.metadata.end()) {
      try {
        optimizer.iterations = std::stoll(it->second);
      } catch (const std::exception&) {
        throw ModelFileError("", "__metadata__.optimizer_iterations is not a number: '" + it->second + "'");
      }
    }
    state.optimizer = std::move(optimizer);
  }
  for (const auto& [name, tensor] : parsed.tensors) {
    if (known.count(name) != 0) continue;
    // Slots of another optimizer (a checkpoint of an Adam job fine-tuned with SGD) are not an
    // error: they are not read.
    if (name.starts_with("optimizer.")) continue;
    throw ModelFileError(name, "tensor '" + name + "' is not a parameter of the model");
  }
  return state;
}

std::optional<std::vector<float>> decode_safetensors(const ParamLayout& layout, std::string_view file) {
  try {
    return decode_model_state(layout, file).params;
  } catch (const ModelFileError&) {
    return std::nullopt;
  }
}

std::optional<std::map<std::string, std::string>> safetensors_metadata(std::string_view file) {
  uint64_t n = 0;
  if (file.size() < 8) return std::nullopt;
  std::memcpy(&n, file.data(), 8);
  if (n > file.size() - 8 || n > (uint64_t{100} << 20)) return std::nullopt;
  boost::system::error_code ec;
  const boost::json::value header = parse_json(file.substr(8, n), ec);
  if (ec || !header.is_object()) return std::nullopt;
  std::map<std::string, std::string> out;
  if (const auto* meta = header.as_object().if_contains("__metadata__"); meta != nullptr && meta->is_object()) {
    for (const auto& [key, value] : meta->as_object()) {
      if (value.is_string()) out[std::string(key)] = std::string(value.as_string());
    }
  }
  return out;
}

}  // namespace pstrain

namespace pstrain {

SafetensorsContents inspect_safetensors(std::string_view file) {
  const ParsedFile parsed = parse(file);
  SafetensorsContents out;
  out.metadata = parsed.metadata;
  std::vector<float> values;
  for (const auto& [name, s] : parsed.tensors) {
    const size_t n = (s.end - s.begin) / dtype_bytes(s.dtype);
    values.resize(n);
    convert(s.dtype, parsed.data.data() + s.begin, n, values.data());
    for (size_t i = 0; i < n; ++i) {
      if (!std::isfinite(values[i])) {
        throw ModelFileError(name, "tensor '" + name + "' holds a value that is not a finite float32 (at flat index " +
                                       std::to_string(i) + ")");
      }
    }
    out.tensors.push_back({name, s.dtype, s.shape});
  }
  return out;
}

}  // namespace pstrain
