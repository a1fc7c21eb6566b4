#include "common/safetensors.h"

#include <boost/json.hpp>

#include <algorithm>
#include <bit>
#include <cstdint>
#include <cstring>

#include "common/json_text.h"

namespace pstrain {

namespace {

// The 8-byte length and the JSON header, padded with spaces so the data starts 8-byte aligned
// (allowed by the format, expected by loaders that map the file).
std::string header(const ParamLayout& layout, const std::vector<std::pair<std::string, std::string>>& metadata) {
  namespace json = boost::json;
  json::object header;
  json::object meta;
  for (const auto& [k, v] : metadata) meta[k] = v;
  header["__metadata__"] = std::move(meta);
  size_t offset = 0;
  for (const ParamInfo& p : layout.params()) {
    json::array shape;
    for (int64_t d : p.shape) shape.push_back(d);
    const size_t bytes = p.size * sizeof(float);
    header[p.name] = json::object{{"dtype", "F32"}, {"shape", std::move(shape)},
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

}  // namespace

std::vector<std::string> encode_safetensors_pieces(const ParamLayout& layout, std::span<const float> params,
                                                   const std::vector<std::pair<std::string, std::string>>& metadata,
                                                   size_t max_piece_bytes) {
  static_assert(std::endian::native == std::endian::little, "safetensors data is little-endian");
  std::vector<std::string> pieces{header(layout, metadata)};
  for (const ParamInfo& p : layout.params()) {
    const char* data = reinterpret_cast<const char*>(params.data() + p.offset);
    size_t left = p.size * sizeof(float);
    while (left > 0) {
      if (pieces.back().size() >= max_piece_bytes) pieces.emplace_back();
      std::string& piece = pieces.back();
      if (piece.capacity() < max_piece_bytes) piece.reserve(max_piece_bytes);
      const size_t n = std::min(left, max_piece_bytes - piece.size());
      piece.append(data, n);
      data += n;
      left -= n;
    }
  }
  for (std::string& piece : pieces) piece.shrink_to_fit();
  return pieces;
}

std::string encode_safetensors(const ParamLayout& layout, std::span<const float> params,
                               const std::vector<std::pair<std::string, std::string>>& metadata) {
  std::string out;
  for (const std::string& piece : encode_safetensors_pieces(layout, params, metadata, SIZE_MAX)) out += piece;
  return out;
}

std::optional<std::vector<float>> decode_safetensors(const ParamLayout& layout, std::string_view file) {
  uint64_t n = 0;
  if (file.size() < 8) return std::nullopt;
  std::memcpy(&n, file.data(), 8);
  size_t floats = 0;
  for (const ParamInfo& p : layout.params()) floats += p.size;
  if (n > file.size() - 8 || file.size() - 8 - n != floats * sizeof(float)) return std::nullopt;
  std::vector<float> params(layout.total_size(), 0.0f);
  const char* data = file.data() + 8 + n;
  for (const ParamInfo& p : layout.params()) {
    std::memcpy(params.data() + p.offset, data, p.size * sizeof(float));
    data += p.size * sizeof(float);
  }
  return params;
}

std::optional<std::map<std::string, std::string>> safetensors_metadata(std::string_view file) {
  uint64_t n = 0;
  if (file.size() < 8) return std::nullopt;
  std::memcpy(&n, file.data(), 8);
  if (n > file.size() - 8 || n > (uint64_t{100} << 20)) return std::nullopt;
  boost::system::error_code ec;
  const boost::json::value header = boost::json::parse(file.substr(8, n), ec);
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
