#include "coordinator/safetensors.h"

#include <boost/json.hpp>

#include <bit>
#include <cstring>

#include "common/json_text.h"

namespace pstrain {

std::string encode_safetensors(const ParamLayout& layout, std::span<const float> params,
                               const std::vector<std::pair<std::string, std::string>>& metadata) {
  namespace json = boost::json;
  static_assert(std::endian::native == std::endian::little, "safetensors data is little-endian");
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
  std::string header_text = to_json_text(header);
  // Pad with spaces so the data starts 8-byte aligned (allowed by the format, expected by loaders
  // that map the file).
  while ((header_text.size() + 8) % 8 != 0) header_text.push_back(' ');
  std::string out(8 + header_text.size() + offset, '\0');
  const uint64_t n = header_text.size();
  std::memcpy(out.data(), &n, 8);
  std::memcpy(out.data() + 8, header_text.data(), header_text.size());
  char* data = out.data() + 8 + header_text.size();
  for (const ParamInfo& p : layout.params()) {
    std::memcpy(data, params.data() + p.offset, p.size * sizeof(float));
    data += p.size * sizeof(float);
  }
  return out;
}

}  // namespace pstrain
