// The model file codec (common/engine/safetensors.h): what pstrain writes reads back bit for bit, with and
// without the optimizer's slots; files written elsewhere (numpy: another tensor order, F64, F16,
// BF16) are read by name and converted; every defect is a ModelFileError naming the tensor.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "common/engine/optim/optimizer.h"
#include "common/base/rng.h"
#include "common/engine/safetensors.h"

using namespace pstrain;

namespace {

// Two tensors with padding between them: kernel [3, 5] at 0, bias [5] at 16.
ParamLayout small_layout() {
  ParamLayout layout;
  layout.add({.name = "layers.0.kernel", .shape = {3, 5}});
  layout.add({.name = "layers.0.bias", .shape = {5}, .role = ParamRole::kBias});
  return layout;
}

// Values in every tensor, zeros in the padding (as a layout's buffer is).
std::vector<float> random_values(const ParamLayout& layout, uint64_t seed) {
  Rng rng(seed);
  std::vector<float> v(layout.total_size(), 0.0f);
  for (const ParamInfo& p : layout.params()) {
    for (size_t i = 0; i < p.size; ++i) v[p.offset + i] = rng.uniform_float(-1.0f, 1.0f);
  }
  return v;
}

optim::OptimizerState state_of(const OptimizerSpec& spec, const ParamLayout& layout, int64_t iterations) {
  optim::OptimizerState state = optim::make_optimizer(spec)->make_state(layout.total_size());
  uint64_t seed = 100;
  for (optim::Slot& slot : state.slots) slot.values = random_values(layout, seed++);
  state.iterations = iterations;
  return state;
}

std::vector<std::string> slot_names(const OptimizerSpec& spec) {
  std::vector<std::string> names;
  for (const optim::Slot& s : optim::make_optimizer(spec)->make_state(0).slots) names.push_back(s.name);
  return names;
}

OptimizerSpec adam() {
  OptimizerSpec spec;
  spec.type = OptimizerType::kAdam;
  return spec;
}

OptimizerSpec sgd_momentum() {
  OptimizerSpec spec;
  spec.type = OptimizerType::kSgd;
  spec.momentum = 0.9f;
  return spec;
}

// A safetensors file built by hand, as numpy's writer (or anyone's) would: tensors in the order
// given, each with its dtype and raw bytes; `header_override` replaces the JSON header.
struct HandTensor {
  std::string name, dtype;
  Shape shape;
  std::string bytes;
  std::string offsets;  // "[a, b]" to lie about them; empty: the true range
};

std::string hand_file(const std::vector<HandTensor>& tensors, const std::string& metadata = "") {
  std::string header = "{";
  std::string data;
  if (!metadata.empty()) header += "\"__metadata__\":" + metadata;
  for (const HandTensor& t : tensors) {
    if (header.size() > 1) header += ",";
    std::string shape;
    for (int64_t d : t.shape) shape += (shape.empty() ? "" : ",") + std::to_string(d);
    const std::string offsets = t.offsets.empty() ? "[" + std::to_string(data.size()) + "," +
                                                        std::to_string(data.size() + t.bytes.size()) + "]"
                                                  : t.offsets;
    header += "\"" + t.name + "\":{\"dtype\":\"" + t.dtype + "\",\"shape\":[" + shape + "],\"data_offsets\":" + offsets + "}";
    data += t.bytes;
  }
  header += "}";
  const uint64_t n = header.size();
  std::string out(8, '\0');
  std::memcpy(out.data(), &n, 8);
  return out + header + data;
}

template <typename T>
std::string bytes_of(const std::vector<T>& values) {
  std::string out(values.size() * sizeof(T), '\0');
  std::memcpy(out.data(), values.data(), out.size());
  return out;
}

std::string f32_bytes(const std::vector<float>& values, const ParamInfo& p) {
  return bytes_of(std::vector<float>(values.begin() + static_cast<ptrdiff_t>(p.offset),
                                     values.begin() + static_cast<ptrdiff_t>(p.offset + p.size)));
}

// The tensor a decode blames, or "(no error)".
std::string blamed(const ParamLayout& layout, const std::string& file, const std::vector<std::string>& slots = {}) {
  try {
    decode_model_state(layout, file, slots);
  } catch (const ModelFileError& e) {
    INFO("message: " << e.what());
    CHECK(std::string(e.what()).find('\n') == std::string::npos);
    return e.tensor();
  }
  return "(no error)";
}

std::string message_of(const ParamLayout& layout, const std::string& file, const std::vector<std::string>& slots = {}) {
  try {
    decode_model_state(layout, file, slots);
  } catch (const ModelFileError& e) {
    return e.what();
  }
  return "(no error)";
}

// A correct F32 file of both tensors in layout order.
std::string good_file(const ParamLayout& layout, const std::vector<float>& params) {
  const ParamInfo& k = layout.params()[0];
  const ParamInfo& b = layout.params()[1];
  return hand_file({{k.name, "F32", k.shape, f32_bytes(params, k)}, {b.name, "F32", b.shape, f32_bytes(params, b)}});
}

}  // namespace

TEST_CASE("safetensors: parameters and metadata round trip, without optimizer state") {
  const ParamLayout layout = small_layout();
  const std::vector<float> params = random_values(layout, 1);
  const std::string file = encode_safetensors(layout, params, {{"format", "pstrain"}, {"step", "42"}});
  // The data starts 8-byte aligned.
  uint64_t n = 0;
  std::memcpy(&n, file.data(), 8);
  CHECK((8 + n) % 8 == 0);
  CHECK(file.size() == 8 + n + 4 * (15 + 5));

  const ModelState state = decode_model_state(layout, file, slot_names(adam()));
  CHECK(state.params == params);  // bit for bit, zeros in the padding
  CHECK_FALSE(state.optimizer.has_value());
  CHECK(state.metadata.at("format") == "pstrain");
  CHECK(state.metadata.at("step") == "42");
  CHECK(state.metadata.count("optimizer_iterations") == 0);
  CHECK(decode_safetensors(layout, file) == params);
  CHECK(safetensors_metadata(file)->at("step") == "42");

  // In pieces: the same bytes.
  std::string joined;
  for (const std::string& piece : encode_safetensors_pieces(layout, params, {{"step", "42"}}, 24)) {
    CHECK(piece.size() <= std::max<size_t>(24, 8 + n));
    joined += piece;
  }
  CHECK(joined == encode_safetensors(layout, params, {{"step", "42"}}));
}

TEST_CASE("safetensors: Adam's m and v and its update count round trip") {
  const ParamLayout layout = small_layout();
  const std::vector<float> params = random_values(layout, 2);
  const optim::OptimizerState adam_state = state_of(adam(), layout, 17);
  const std::string file = encode_safetensors(layout, params, {{"step", "17"}}, &adam_state);
  const auto metadata = safetensors_metadata(file);
  CHECK(metadata->at("optimizer_iterations") == "17");

  const ModelState state = decode_model_state(layout, file, {"m", "v"});
  CHECK(state.params == params);
  REQUIRE(state.optimizer.has_value());
  CHECK(state.optimizer->iterations == 17);
  REQUIRE(state.optimizer->slots.size() == 2);
  CHECK(state.optimizer->slots[0].name == "m");
  CHECK(state.optimizer->slots[1].name == "v");
  CHECK(state.optimizer->slots[0].values == adam_state.slots[0].values);
  CHECK(state.optimizer->slots[1].values == adam_state.slots[1].values);
  CHECK(optimizer_tensor_name("m", "layers.0.kernel") == "optimizer.m.layers.0.kernel");
  CHECK(std::string_view(file).find("\"optimizer.v.layers.0.bias\"") != std::string_view::npos);

  // Read for parameters only (fine-tune), the slots are not an error.
  const ModelState params_only = decode_model_state(layout, file);
  CHECK(params_only.params == params);
  CHECK_FALSE(params_only.optimizer.has_value());
  CHECK(decode_safetensors(layout, file) == params);
}

TEST_CASE("safetensors: SGD's momentum round trips - another optimizer's slots are ignored") {
  const ParamLayout layout = small_layout();
  const std::vector<float> params = random_values(layout, 3);
  const optim::OptimizerState momentum = state_of(sgd_momentum(), layout, 5);
  const std::string file = encode_safetensors(layout, params, {}, &momentum);
  const ModelState state = decode_model_state(layout, file, slot_names(sgd_momentum()));
  REQUIRE(state.optimizer.has_value());
  CHECK(state.optimizer->iterations == 5);
  REQUIRE(state.optimizer->slots.size() == 1);
  CHECK(state.optimizer->slots[0].name == "momentum");
  CHECK(state.optimizer->slots[0].values == momentum.slots[0].values);

  // An Adam checkpoint read for SGD with momentum (and the other way round): parameters, no
  // optimizer state, no error.
  const optim::OptimizerState adam_state = state_of(adam(), layout, 9);
  const std::string adam_file = encode_safetensors(layout, params, {}, &adam_state);
  const ModelState as_sgd = decode_model_state(layout, adam_file, slot_names(sgd_momentum()));
  CHECK(as_sgd.params == params);
  CHECK_FALSE(as_sgd.optimizer.has_value());
  const ModelState as_adam = decode_model_state(layout, file, slot_names(adam()));
  CHECK(as_adam.params == params);
  CHECK_FALSE(as_adam.optimizer.has_value());
}

TEST_CASE("safetensors: some of the optimizer's slots, not all, is an error naming a missing one") {
  const ParamLayout layout = small_layout();
  const std::vector<float> params = random_values(layout, 4);
  const optim::OptimizerState s = state_of(adam(), layout, 3);
  const ParamInfo& k = layout.params()[0];
  const ParamInfo& b = layout.params()[1];
  // m for both tensors, v for the kernel only.
  const std::string file = hand_file({{k.name, "F32", k.shape, f32_bytes(params, k)},
                                      {b.name, "F32", b.shape, f32_bytes(params, b)},
                                      {"optimizer.m." + k.name, "F32", k.shape, f32_bytes(s.slots[0].values, k)},
                                      {"optimizer.m." + b.name, "F32", b.shape, f32_bytes(s.slots[0].values, b)},
                                      {"optimizer.v." + k.name, "F32", k.shape, f32_bytes(s.slots[1].values, k)}});
  CHECK(blamed(layout, file, {"m", "v"}) == "optimizer.v.layers.0.bias");
  CHECK(message_of(layout, file, {"m", "v"}).find("some of the optimizer's slots") != std::string::npos);
  // Read for parameters only, the partial slots do not matter.
  CHECK(decode_model_state(layout, file).params == params);
  // A slot of the wrong shape is named too.
  const std::string wrong = hand_file({{k.name, "F32", k.shape, f32_bytes(params, k)},
                                       {b.name, "F32", b.shape, f32_bytes(params, b)},
                                       {"optimizer.momentum." + k.name, "F32", {5, 3}, f32_bytes(params, k)},
                                       {"optimizer.momentum." + b.name, "F32", b.shape, f32_bytes(params, b)}});
  CHECK(blamed(layout, wrong, {"momentum"}) == "optimizer.momentum.layers.0.kernel");
}

TEST_CASE("safetensors: a file written by numpy: another order, F64, F16 and BF16 converted") {
  ParamLayout layout;
  layout.add({.name = "a.f64", .shape = {3}});
  layout.add({.name = "b.f16", .shape = {2, 4}});
  layout.add({.name = "c.bf16", .shape = {4}});
  layout.add({.name = "d.f32", .shape = {1, 2}});
  const std::vector<double> f64 = {0.1, -1e-3, 12345.678};
  // 1, -2, 0.5, 65504 (the largest half), 2^-24 (the smallest subnormal), 2^-14 (the smallest
  // normal), -0, 0.333251953125 (0x3555).
  const std::vector<uint16_t> f16 = {0x3C00, 0xC000, 0x3800, 0x7BFF, 0x0001, 0x0400, 0x8000, 0x3555};
  const std::vector<float> f16_values = {1.0f, -2.0f, 0.5f, 65504.0f, 0x1p-24f, 0x1p-14f, -0.0f, 0.333251953125f};
  // 1, -2.5, 3.140625, 1e-40-ish subnormal (0x0001 -> 2^-133).
  const std::vector<uint16_t> bf16 = {0x3F80, 0xC020, 0x4049, 0x0001};
  const std::vector<float> bf16_values = {1.0f, -2.5f, 3.140625f, 0x1p-133f};
  const std::vector<float> f32 = {7.25f, -0.125f};
  // Written backwards, with metadata and one more tensor's worth of nothing in between.
  const std::string file = hand_file({{"d.f32", "F32", {1, 2}, bytes_of(f32)},
                                      {"c.bf16", "BF16", {4}, bytes_of(bf16)},
                                      {"b.f16", "F16", {2, 4}, bytes_of(f16)},
                                      {"a.f64", "F64", {3}, bytes_of(f64)}},
                                     R"({"format":"pt","epoch":"3","not_a_string":7})");
  const ModelState state = decode_model_state(layout, file);
  CHECK(state.metadata.at("format") == "pt");
  CHECK(state.metadata.count("not_a_string") == 0);
  const auto at = [&](const std::string& name, size_t i) { return state.params[layout.find(name)->offset + i]; };
  for (size_t i = 0; i < f64.size(); ++i) CHECK(at("a.f64", i) == static_cast<float>(f64[i]));
  for (size_t i = 0; i < f16.size(); ++i) {
    INFO("F16 " << i);
    CHECK(at("b.f16", i) == f16_values[i]);
  }
  CHECK(std::signbit(at("b.f16", 6)));
  for (size_t i = 0; i < bf16.size(); ++i) {
    INFO("BF16 " << i);
    CHECK(at("c.bf16", i) == bf16_values[i]);
  }
  CHECK(at("d.f32", 0) == 7.25f);
  CHECK(at("d.f32", 1) == -0.125f);
  // The padding between tensors is zero.
  for (size_t i = layout.find("a.f64")->size; i < layout.find("b.f16")->offset; ++i) CHECK(state.params[i] == 0.0f);
  // Half infinities and NaN.
  ParamLayout one;
  one.add({.name = "x", .shape = {3}});
  const ModelState special = decode_model_state(one, hand_file({{"x", "F16", {3}, bytes_of(std::vector<uint16_t>{0x7C00, 0xFC00, 0x7E00})}}));
  CHECK(special.params[0] == INFINITY);
  CHECK(special.params[1] == -INFINITY);
  CHECK(std::isnan(special.params[2]));
}

TEST_CASE("safetensors: every defect is an error naming the tensor at fault") {
  const ParamLayout layout = small_layout();
  const std::vector<float> params = random_values(layout, 5);
  const ParamInfo& k = layout.params()[0];
  const ParamInfo& b = layout.params()[1];
  const std::string kernel = f32_bytes(params, k), bias = f32_bytes(params, b);
  REQUIRE(blamed(layout, good_file(layout, params)) == "(no error)");

  SUBCASE("a missing tensor") {
    const std::string file = hand_file({{k.name, "F32", k.shape, kernel}});
    CHECK(blamed(layout, file) == "layers.0.bias");
    CHECK(message_of(layout, file).find("missing") != std::string::npos);
    CHECK_FALSE(decode_safetensors(layout, file).has_value());
  }
  SUBCASE("a wrong shape (same element count)") {
    const std::string file = hand_file({{k.name, "F32", {5, 3}, kernel}, {b.name, "F32", b.shape, bias}});
    CHECK(blamed(layout, file) == "layers.0.kernel");
    CHECK(message_of(layout, file).find("[5, 3]") != std::string::npos);
    CHECK(message_of(layout, file).find("[3, 5]") != std::string::npos);
  }
  SUBCASE("an extra tensor that is not a parameter") {
    const std::string file =
        hand_file({{k.name, "F32", k.shape, kernel}, {b.name, "F32", b.shape, bias}, {"layers.9.kernel", "F32", {2}, bytes_of(std::vector<float>{1, 2})}});
    CHECK(blamed(layout, file) == "layers.9.kernel");
    CHECK(message_of(layout, file).find("not a parameter") != std::string::npos);
  }
  SUBCASE("an unknown dtype (I8)") {
    const std::string file = hand_file({{k.name, "F32", k.shape, kernel}, {b.name, "I8", b.shape, std::string(5, '\1')}});
    CHECK(blamed(layout, file) == "layers.0.bias");
    CHECK(message_of(layout, file).find("I8") != std::string::npos);
  }
  SUBCASE("data_offsets past the end of the data") {
    const std::string file = hand_file({{k.name, "F32", k.shape, kernel}, {b.name, "F32", b.shape, bias, "[60, 100]"}});
    CHECK(blamed(layout, file) == "layers.0.bias");
    const std::string huge = hand_file({{k.name, "F32", k.shape, kernel, "[0, 18446744073709551615]"}, {b.name, "F32", b.shape, bias}});
    CHECK(blamed(layout, huge) == "layers.0.kernel");
  }
  SUBCASE("data_offsets that do not hold the shape's values, or are malformed") {
    CHECK(blamed(layout, hand_file({{k.name, "F32", k.shape, kernel, "[0, 56]"}, {b.name, "F32", b.shape, bias}})) ==
          "layers.0.kernel");
    CHECK(blamed(layout, hand_file({{k.name, "F32", k.shape, kernel, "[8, 4]"}, {b.name, "F32", b.shape, bias}})) ==
          "layers.0.kernel");
    CHECK(blamed(layout, hand_file({{k.name, "F32", k.shape, kernel, "[-4, 56]"}, {b.name, "F32", b.shape, bias}})) ==
          "layers.0.kernel");
    CHECK(blamed(layout, hand_file({{k.name, "F32", k.shape, kernel, "[0.5, 60.5]"}, {b.name, "F32", b.shape, bias}})) ==
          "layers.0.kernel");
    CHECK(blamed(layout, hand_file({{k.name, "F32", k.shape, kernel, "[0]"}, {b.name, "F32", b.shape, bias}})) ==
          "layers.0.kernel");
  }
  SUBCASE("a truncated file: the tensors past its end are named") {
    const std::string file = good_file(layout, params);
    CHECK(blamed(layout, file.substr(0, file.size() - 1)) == "layers.0.bias");
    // Cut inside the header or its length: the file as a whole.
    CHECK(blamed(layout, file.substr(0, 20)).empty());
    CHECK(blamed(layout, file.substr(0, 5)).empty());
    CHECK(blamed(layout, "").empty());
  }
  SUBCASE("a header length past the end of the file") {
    std::string file = good_file(layout, params);
    const uint64_t n = file.size();  // 8 + header + data: more than what follows the length
    std::memcpy(file.data(), &n, 8);
    CHECK(blamed(layout, file).empty());
    CHECK(message_of(layout, file).find("past the end") != std::string::npos);
    const uint64_t absurd = ~uint64_t{0};
    std::memcpy(file.data(), &absurd, 8);
    CHECK(blamed(layout, file).empty());
    CHECK_FALSE(safetensors_metadata(file).has_value());
  }
  SUBCASE("a header that is not JSON, or a tensor entry that is not an object") {
    std::string file = good_file(layout, params);
    file[8] = '[';
    CHECK(blamed(layout, file).empty());
    const std::string header = R"({"layers.0.kernel":5})";
    std::string not_object(8, '\0');
    const uint64_t n = header.size();
    std::memcpy(not_object.data(), &n, 8);
    CHECK(blamed(layout, not_object + header) == "layers.0.kernel");
  }
}

TEST_CASE("safetensors: a tensor of no elements is read without touching its (absent) data") {
  // Found by fuzz/safetensors_fuzz.cc under UBSan: converting 0 values passed a null pointer to
  // memcpy. (The sanitizer runs of the unit tests check this case too.)
  const std::string header = R"({"empty": {"dtype": "F32", "shape": [0], "data_offsets": [0, 0]},)"
                             R"( "one": {"dtype": "F64", "shape": [1], "data_offsets": [0, 8]}})";
  std::string file(8, '\0');
  const uint64_t n = header.size();
  std::memcpy(file.data(), &n, 8);
  file += header;
  const double one = 1.5;
  file.append(reinterpret_cast<const char*>(&one), 8);
  const SafetensorsContents contents = inspect_safetensors(file);
  REQUIRE(contents.tensors.size() == 2);
  const auto empty = std::find_if(contents.tensors.begin(), contents.tensors.end(),
                                  [](const SafetensorsTensor& t) { return t.name == "empty"; });
  REQUIRE(empty != contents.tensors.end());
  CHECK(empty->shape == Shape{0});
}
