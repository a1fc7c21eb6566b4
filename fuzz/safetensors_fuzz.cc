// Fuzz target: the safetensors reader and writer (common/engine/safetensors.h). Any bytes go to
// inspect_safetensors and to decode_model_state against a small fixed layout (two tensors with
// padding between them, Adam's slots); ModelFileError is the expected answer to most. A file that
// decodes must survive encode → decode bit for bit: parameters, padding, slots, iterations and
// metadata.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "common/engine/safetensors.h"

namespace {

[[noreturn]] void broken(const char* what) {
  std::fprintf(stderr, "round trip broken: %s\n", what);
  std::abort();
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

const pstrain::ParamLayout& layout() {
  static const pstrain::ParamLayout l = [] {
    pstrain::ParamLayout l;
    l.add({.name = "layers.0.kernel", .shape = {3, 5}});
    l.add({.name = "layers.0.bias", .shape = {5}, .role = pstrain::ParamRole::kBias});
    return l;
  }();
  return l;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view file(reinterpret_cast<const char*>(data), size);
  try {
    (void)pstrain::inspect_safetensors(file);
  } catch (const pstrain::ModelFileError&) {
  }
  (void)pstrain::safetensors_metadata(file);
  pstrain::ModelState state;
  try {
    state = pstrain::decode_model_state(layout(), file, {"m", "v"});
  } catch (const pstrain::ModelFileError&) {
    return 0;
  }
  // What the writer adds itself is not passed back to it.
  pstrain::Metadata metadata;
  for (const auto& [k, v] : state.metadata) {
    if (!(state.optimizer && k == "optimizer_iterations")) metadata.emplace_back(k, v);
  }
  const std::string encoded = pstrain::encode_safetensors(
      layout(), state.params, metadata, state.optimizer ? &*state.optimizer : nullptr);
  pstrain::ModelState again;
  try {
    again = pstrain::decode_model_state(layout(), encoded, {"m", "v"});
  } catch (const pstrain::ModelFileError& e) {
    std::fprintf(stderr, "re-encoded file does not decode: %s\n", e.what());
    broken("decode(encode(state)) throws");
  }
  if (!same_bits(state.params, again.params)) broken("parameters");
  if (state.optimizer.has_value() != again.optimizer.has_value()) broken("optimizer presence");
  if (state.optimizer) {
    if (state.optimizer->iterations != again.optimizer->iterations) broken("iterations");
    if (state.optimizer->slots.size() != again.optimizer->slots.size()) broken("slot count");
    for (size_t i = 0; i < state.optimizer->slots.size(); ++i) {
      if (state.optimizer->slots[i].name != again.optimizer->slots[i].name) broken("slot name");
      if (!same_bits(state.optimizer->slots[i].values, again.optimizer->slots[i].values)) broken("slot values");
    }
    again.metadata.erase("optimizer_iterations");
    state.metadata.erase("optimizer_iterations");
  }
  if (state.metadata != again.metadata) broken("metadata");
  return 0;
}
