// Writes ONNX exports and what the engine computes for them, for tests/onnx/run_onnx_test.sh:
// for every job spec given (the reference jobs of deploy/jobs/ and the models of
// tests/onnx/models/), parameters from the spec's seed with every tensor moved off its start
// (kernels scaled by up to 20%, biases, gammas and moving statistics shifted), `count` random inputs (raw pixel values for
// images, ids where a model reads ids through a slice), the engine's forward pass, and in
// <out>/<name>.*: the .onnx, the raw inputs (.input.f32), the engine's probabilities or values
// (.expected.f32), the parameters as a model file (.safetensors, the spec in its metadata) and a
// .json saying the shapes. The runtime's answers are compared by
// tests/onnx/compare.mjs.
//
// Usage: onnx_fixture OUT_DIR COUNT SPEC.json...
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "common/data/job_spec.h"
#include "common/engine/nn/loss.h"
#include "common/engine/nn/model.h"
#include "common/engine/safetensors.h"
#include "common/export/onnx_export.h"

using namespace pstrain;

namespace {

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

void write_floats(const std::string& path, const std::vector<float>& v) {
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(v.data()), static_cast<std::streamsize>(v.size() * sizeof(float)));
}

// The features a slice feeds to an embedding read ids: [begin, begin + size) -> input_dim, or
// -input_dim where the embedding has a combiner (its ids may be padding: -1).
std::vector<std::pair<int64_t, int64_t>> id_features(const ModelSpec& spec) {
  std::vector<std::pair<int64_t, int64_t>> ids;
  for (const LayerSpec& l : spec.layers) {
    if (l.type != LayerType::kEmbedding) continue;
    const int64_t dim = l.combiner == Combiner::kNone ? l.input_dim : -l.input_dim;
    for (const LayerSpec& s : spec.layers) {
      const bool feeds = !l.inputs.empty() && s.name == l.inputs[0] && s.type == LayerType::kSlice;
      if (feeds) {
        for (int64_t f = s.begin; f < s.begin + s.size; ++f) ids.emplace_back(f, dim);
      }
    }
    if (l.inputs.empty() || l.inputs[0] == "input") {
      for (int64_t f = 0; f < num_elements(spec.input_shape); ++f) ids.emplace_back(f, dim);
    }
  }
  return ids;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 4) {
    std::fprintf(stderr, "usage: onnx_fixture OUT_DIR COUNT SPEC.json...\n");
    return 2;
  }
  const std::filesystem::path out_dir = argv[1];
  const int64_t count = std::stoll(argv[2]);
  std::filesystem::create_directories(out_dir);
  for (int a = 3; a < argc; ++a) {
    const std::string file = argv[a];
    const std::string name = std::filesystem::path(file).stem().string();
    const JobSpec job = parse_accepted_job_spec(read_text(file));
    const ModelSpec& spec = job.model;
    const ParamLayout layout = make_param_layout(spec);
    std::vector<float> params(layout.total_size());
    glorot_uniform_init(layout, spec.seed, params.data());
    std::mt19937 rng(static_cast<uint32_t>(spec.seed * 7919 + 17));
    std::uniform_real_distribution<float> small(-0.2f, 0.2f), unit(0.0f, 1.0f);
    for (const ParamInfo& p : layout.params()) {
      for (size_t k = 0; k < static_cast<size_t>(num_elements(p.shape)); ++k) {
        float& v = params[p.offset + k];
        // Kernels and embeddings keep their initializer's scale (the activations a trained model
        // has); the rest leave their starting values (zero biases, unit gammas, ...).
        if (p.role == ParamRole::kKernel || p.role == ParamRole::kEmbeddings) v *= 1.0f + small(rng);
        else v = p.role == ParamRole::kMovingVariance ? 0.3f + unit(rng) : v + small(rng);
      }
    }
    // Images are uint8 datasets the engine sees as pixel / 255 (the data service's scaling);
    // flat inputs are features as they are.
    const bool images = spec.input_shape.size() == 3;
    const float scale = images ? 1.0f / 255.0f : 1.0f;
    const int64_t width = num_elements(spec.input_shape);
    std::vector<float> raw(static_cast<size_t>(width * count));
    for (float& v : raw) v = images ? std::floor(unit(rng) * 256.0f) : 4.0f * unit(rng) - 2.0f;
    for (const auto& [feature, dim] : id_features(spec)) {
      for (int64_t b = 0; b < count; ++b) {
        float& v = raw[static_cast<size_t>(b * width + feature)];
        v = std::floor(unit(rng) * static_cast<float>(std::abs(dim)));
        if (dim < 0 && unit(rng) < 0.4f) v = -1.0f;  // padding, 40% (some examples all padding)
      }
    }
    // A masking embedding (mask_zero) over the whole input reads a tokenizer's sequences: ids from
    // 1 and trailing padding 0s, each example's length uniform in 0..width (some all padding).
    for (const LayerSpec& l : spec.layers) {
      if (l.type != LayerType::kEmbedding || !l.mask_zero || (!l.inputs.empty() && l.inputs[0] != "input")) continue;
      for (int64_t b = 0; b < count; ++b) {
        const auto length = static_cast<int64_t>(unit(rng) * static_cast<float>(width + 1));
        for (int64_t f = 0; f < width; ++f) {
          float& v = raw[static_cast<size_t>(b * width + f)];
          v = f < length ? 1.0f + std::floor(unit(rng) * static_cast<float>(l.input_dim - 1)) : 0.0f;
        }
      }
    }
    std::vector<float> seen(raw.size());
    for (size_t k = 0; k < raw.size(); ++k) seen[k] = raw[k] * scale;

    nn::Model<float> model(spec, count, job.loss);
    const auto outputs = model.forward(params.data(), seen.data(), count);
    const int64_t n = model.output_size();
    const bool regression = is_regression(job.loss);
    const int64_t classes = regression ? n : nn::loss_classes(job.loss, n);
    const bool multi_label = job.loss.type == LossType::kBinaryCrossEntropy && n > 1;
    std::vector<float> expected;
    std::vector<double> probabilities(static_cast<size_t>(classes));
    for (int64_t b = 0; b < count; ++b) {
      const float* z = outputs.data() + b * n;
      if (regression) {
        expected.insert(expected.end(), z, z + n);
      } else if (multi_label) {
        for (int64_t k = 0; k < n; ++k) expected.push_back(static_cast<float>(1.0 / (1.0 + std::exp(-static_cast<double>(z[k])))));
      } else {
        nn::class_probabilities(job.loss, z, n, probabilities.data());
        for (const double p : probabilities) expected.push_back(static_cast<float>(p));
      }
    }
    OnnxExport what;
    what.model = &spec;
    what.loss = job.loss;
    what.params = params;
    what.input_scale = scale;
    what.metadata = {{"job", name}};
    const std::string bytes = export_onnx(what);
    std::ofstream((out_dir / (name + ".onnx")).string(), std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    write_floats((out_dir / (name + ".input.f32")).string(), raw);
    // The same parameters as a model file with its architecture, for the REST test's uploads.
    const std::string model_file = encode_safetensors(layout, params, {{"spec", job_spec_to_json(job)}});
    std::ofstream((out_dir / (name + ".safetensors")).string(), std::ios::binary).write(model_file.data(), static_cast<std::streamsize>(model_file.size()));
    write_floats((out_dir / (name + ".expected.f32")).string(), expected);
    std::string shape;
    for (const int64_t d : spec.input_shape) shape += (shape.empty() ? "" : ", ") + std::to_string(d);
    std::ofstream((out_dir / (name + ".json")).string())
        << "{\"count\": " << count << ", \"input_shape\": [" << shape << "], \"output\": \""
        << (regression ? "values" : "probabilities") << "\", \"width\": " << classes << ", \"loss\": \""
        << (regression ? "regression" : job.loss.type == LossType::kBinaryCrossEntropy ? "binary" : "softmax") << "\"}\n";
    std::printf("%s: %zu bytes, %lld parameters\n", name.c_str(), bytes.size(), static_cast<long long>(layout.total_size()));
  }
  return 0;
}
