// pstrain-rnn-bench: our LSTM (nn::Recurrent<float>, per-step products and scalar gate loops) against
// oneDNN's LSTM primitives on the same weights and sequences, interleaved, as ratios.
//
// For each geometry below, repeat by repeat, it times one training step of the layer with each in
// turn: forward (every step's output) and backward (the input's and every weight's gradient).
// oneDNN's share includes what training with it would cost each step: the weights reordered from
// Keras' layout into the primitives' preferred ones (ours reads them in place), the weight
// gradients zeroed (oneDNN accumulates into them) and reordered back. It prints the median
// milliseconds of each and ours / oneDNN (> 1: oneDNN is faster), the largest difference between
// the two's outputs and gradients relative to their scale, and whether oneDNN's results are the
// same bits on a second run (determinism, which our exactness contract needs).
//
//   pstrain-rnn-bench [--repeats 7] [--threads 1]
//
// Keras' LSTM layouts are oneDNN's ldigo / ldgo for one layer (gates i, f, c, o in both), so the
// same buffers feed both; sequences are batch-major ([batch, steps, channels]: oneDNN's ntc).
#include <dnnl.hpp>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "common/engine/nn/recurrent.h"

namespace pstrain {
namespace {

using Clock = std::chrono::steady_clock;
using dnnl::memory;
using tag = memory::format_tag;
using dt = memory::data_type;

struct Geometry {
  const char* name;
  int64_t batch, steps, channels, units;
  bool bidirectional;
};

double ms_since(Clock::time_point t) { return std::chrono::duration<double, std::milli>(Clock::now() - t).count(); }

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

double relative_difference(const std::vector<float>& a, const std::vector<float>& b) {
  double worst = 0, scale = 1e-12;
  for (size_t i = 0; i < a.size(); ++i) {
    worst = std::max(worst, static_cast<double>(std::abs(a[i] - b[i])));
    scale = std::max(scale, static_cast<double>(std::abs(b[i])));
  }
  return worst / scale;
}

// One training step's results: the output sequence, then the input's and the weights' gradients.
struct Results {
  std::vector<float> out, din, dkernel, drecurrent, dbias;
};

class OneDnnLstm {
 public:
  OneDnnLstm(const Geometry& g, dnnl::engine& eng) : g_(g), eng_(eng) {
    const memory::dim T = g.steps, N = g.batch, C = g.channels, U = g.units, D = g.bidirectional ? 2 : 1;
    const auto dir = g.bidirectional ? dnnl::rnn_direction::bidirectional_concat : dnnl::rnn_direction::unidirectional_left2right;
    const memory::desc src({T, N, C}, dt::f32, tag::ntc), dst({T, N, D * U}, dt::f32, tag::ntc);
    user_wl_ = memory::desc({1, D, C, 4, U}, dt::f32, tag::ldigo);
    user_wi_ = memory::desc({1, D, U, 4, U}, dt::f32, tag::ldigo);
    const memory::desc bias({1, D, 4, U}, dt::f32, tag::ldgo);
    const memory::desc any_wl({1, D, C, 4, U}, dt::f32, tag::any), any_wi({1, D, U, 4, U}, dt::f32, tag::any);
    const memory::desc none;
    fwd_pd_ = dnnl::lstm_forward::primitive_desc(
        dnnl::lstm_forward::desc(dnnl::prop_kind::forward_training, dir, src, none, none, any_wl, any_wi, bias, dst, none, none), eng);
    bwd_pd_ = dnnl::lstm_backward::primitive_desc(
        dnnl::lstm_backward::desc(dnnl::prop_kind::backward, dir, src, none, none, any_wl, any_wi, bias, dst, none, none, src, none,
                                  none, any_wl, any_wi, bias, dst, none, none),
        eng, fwd_pd_);
    workspace_ = memory(fwd_pd_.workspace_desc(), eng);
    fwd_wl_ = memory(fwd_pd_.weights_layer_desc(), eng);
    fwd_wi_ = memory(fwd_pd_.weights_iter_desc(), eng);
    bwd_wl_ = memory(bwd_pd_.weights_layer_desc(), eng);
    bwd_wi_ = memory(bwd_pd_.weights_iter_desc(), eng);
    diff_wl_ = memory(bwd_pd_.diff_weights_layer_desc(), eng);
    diff_wi_ = memory(bwd_pd_.diff_weights_iter_desc(), eng);
  }

  // weights: Keras' kernel [C, 4U] then recurrent [U, 4U] then bias [4U], per direction, in
  // `kernel`, `recurrent`, `bias` (directions stacked).
  Results step(std::vector<float>& x, std::vector<float>& kernel, std::vector<float>& recurrent, std::vector<float>& bias,
               std::vector<float>& dout) {
    dnnl::stream s(eng_);
    const memory::dim D = g_.bidirectional ? 2 : 1;
    Results r;
    r.out.assign(static_cast<size_t>(g_.batch * g_.steps * D * g_.units), 0.0f);
    r.din.assign(x.size(), 0.0f);
    r.dkernel.assign(kernel.size(), 0.0f);
    r.drecurrent.assign(recurrent.size(), 0.0f);
    r.dbias.assign(bias.size(), 0.0f);
    memory src(fwd_pd_.src_layer_desc(), eng_, x.data()), dst(fwd_pd_.dst_layer_desc(), eng_, r.out.data());
    memory user_wl(user_wl_, eng_, kernel.data()), user_wi(user_wi_, eng_, recurrent.data());
    memory b(fwd_pd_.bias_desc(), eng_, bias.data());
    dnnl::reorder(user_wl, fwd_wl_).execute(s, user_wl, fwd_wl_);
    dnnl::reorder(user_wi, fwd_wi_).execute(s, user_wi, fwd_wi_);
    dnnl::lstm_forward(fwd_pd_).execute(s, {{DNNL_ARG_SRC_LAYER, src}, {DNNL_ARG_WEIGHTS_LAYER, fwd_wl_}, {DNNL_ARG_WEIGHTS_ITER, fwd_wi_},
                                            {DNNL_ARG_BIAS, b}, {DNNL_ARG_DST_LAYER, dst}, {DNNL_ARG_WORKSPACE, workspace_}});
    dnnl::reorder(user_wl, bwd_wl_).execute(s, user_wl, bwd_wl_);
    dnnl::reorder(user_wi, bwd_wi_).execute(s, user_wi, bwd_wi_);
    std::memset(diff_wl_.get_data_handle(), 0, diff_wl_.get_desc().get_size());
    std::memset(diff_wi_.get_data_handle(), 0, diff_wi_.get_desc().get_size());
    memory diff_src(bwd_pd_.diff_src_layer_desc(), eng_, r.din.data()), diff_dst(bwd_pd_.diff_dst_layer_desc(), eng_, dout.data());
    memory diff_b(bwd_pd_.diff_bias_desc(), eng_, r.dbias.data());
    dnnl::lstm_backward(bwd_pd_).execute(
        s, {{DNNL_ARG_SRC_LAYER, src}, {DNNL_ARG_WEIGHTS_LAYER, bwd_wl_}, {DNNL_ARG_WEIGHTS_ITER, bwd_wi_}, {DNNL_ARG_BIAS, b},
            {DNNL_ARG_DST_LAYER, dst}, {DNNL_ARG_DIFF_DST_LAYER, diff_dst}, {DNNL_ARG_WORKSPACE, workspace_},
            {DNNL_ARG_DIFF_SRC_LAYER, diff_src}, {DNNL_ARG_DIFF_WEIGHTS_LAYER, diff_wl_}, {DNNL_ARG_DIFF_WEIGHTS_ITER, diff_wi_},
            {DNNL_ARG_DIFF_BIAS, diff_b}});
    memory user_dwl(user_wl_, eng_, r.dkernel.data()), user_dwi(user_wi_, eng_, r.drecurrent.data());
    dnnl::reorder(diff_wl_, user_dwl).execute(s, diff_wl_, user_dwl);
    dnnl::reorder(diff_wi_, user_dwi).execute(s, diff_wi_, user_dwi);
    s.wait();
    return r;
  }

 private:
  Geometry g_;
  dnnl::engine& eng_;
  memory::desc user_wl_, user_wi_;
  dnnl::lstm_forward::primitive_desc fwd_pd_;
  dnnl::lstm_backward::primitive_desc bwd_pd_;
  memory workspace_, fwd_wl_, fwd_wi_, bwd_wl_, bwd_wi_, diff_wl_, diff_wi_;
};

// Ours on the same buffers: the layer's flat parameters are each direction's kernel, recurrent
// kernel and bias back to back (the layout tensors of model_spec.cc give a bidirectional lstm).
Results ours_step(const Geometry& g, nn::Recurrent<float>& layer, const std::vector<float>& params, const std::vector<size_t>& at,
                  std::vector<float>& x, std::vector<float>& dout) {
  const int64_t D = g.bidirectional ? 2 : 1, G = 4 * g.units, rows = g.steps * D * g.units;
  Results r;
  r.out.assign(static_cast<size_t>(rows * g.batch), 0.0f);
  r.din.assign(x.size(), 0.0f);
  std::vector<float> grads(params.size()), dcopy = dout;
  layer.forward(params.data(), nn::ConstMatMap<float>(x.data(), g.steps * g.channels, g.batch), nn::MatMap<float>(r.out.data(), rows, g.batch));
  layer.backward(params.data(), nn::ConstMatMap<float>(x.data(), g.steps * g.channels, g.batch),
                 nn::ConstMatMap<float>(r.out.data(), rows, g.batch), nn::MatMap<float>(dcopy.data(), rows, g.batch), grads.data(),
                 r.din.data());
  for (int64_t d = 0; d < D; ++d) {
    const size_t base = at[static_cast<size_t>(d)];
    r.dkernel.insert(r.dkernel.end(), grads.begin() + static_cast<long>(base), grads.begin() + static_cast<long>(base + g.channels * G));
    const size_t rec = base + static_cast<size_t>(g.channels * G);
    r.drecurrent.insert(r.drecurrent.end(), grads.begin() + static_cast<long>(rec), grads.begin() + static_cast<long>(rec + g.units * G));
    const size_t bias = rec + static_cast<size_t>(g.units * G);
    r.dbias.insert(r.dbias.end(), grads.begin() + static_cast<long>(bias), grads.begin() + static_cast<long>(bias + G));
  }
  return r;
}

int run(int argc, char** argv) {
  int repeats = 7, threads = 1;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--repeats") repeats = std::max(1, std::atoi(argv[i + 1]));
    else if (flag == "--threads") threads = std::max(1, std::atoi(argv[i + 1]));
    else {
      std::fprintf(stderr, "usage: pstrain-rnn-bench [--repeats 7] [--threads 1]\n");
      return 2;
    }
  }
  omp_set_num_threads(threads);
  dnnl::engine eng(dnnl::engine::kind::cpu, 0);
  std::printf("oneDNN %d.%d.%d, %d thread(s) (ours: 1; oneDNN: OpenMP), %d repeats, median ms per training step\n",
              dnnl_version()->major, dnnl_version()->minor, dnnl_version()->patch, threads, repeats);
  std::printf("%-34s %9s %9s %13s %10s %10s\n", "geometry", "ours", "oneDNN", "ours/oneDNN", "max rel", "oneDNN det");
  const Geometry geometries[] = {
      {"text bilstm 16x200 32->32 bi", 16, 200, 32, 32, true},
      {"text lstm 32x200 32->32", 32, 200, 32, 32, false},
      {"series lstm 32x24 1->32", 32, 24, 1, 32, false},
      {"wide lstm 32x50 128->128", 32, 50, 128, 128, false},
      {"wide bilstm 64x100 64->128 bi", 64, 100, 64, 128, true},
  };
  for (const Geometry& g : geometries) {
    const int64_t D = g.bidirectional ? 2 : 1, G = 4 * g.units;
    std::mt19937 rng(7);
    std::uniform_real_distribution<float> value(-0.3f, 0.3f);
    const auto random = [&](size_t n) {
      std::vector<float> v(n);
      for (float& f : v) f = value(rng);
      return v;
    };
    std::vector<float> kernel = random(static_cast<size_t>(D * g.channels * G)), recurrent = random(static_cast<size_t>(D * g.units * G));
    std::vector<float> bias = random(static_cast<size_t>(D * G));
    std::vector<float> x = random(static_cast<size_t>(g.batch * g.steps * g.channels));
    std::vector<float> dout = random(static_cast<size_t>(g.batch * g.steps * D * g.units));
    // Ours: per direction kernel, recurrent, bias back to back.
    std::vector<float> params;
    std::vector<size_t> at;
    std::vector<nn::Recurrent<float>::Tensors> tensors;
    for (int64_t d = 0; d < D; ++d) {
      at.push_back(params.size());
      const size_t k = params.size();
      params.insert(params.end(), kernel.begin() + d * g.channels * G, kernel.begin() + (d + 1) * g.channels * G);
      const size_t r = params.size();
      params.insert(params.end(), recurrent.begin() + d * g.units * G, recurrent.begin() + (d + 1) * g.units * G);
      const size_t b = params.size();
      params.insert(params.end(), bias.begin() + d * G, bias.begin() + (d + 1) * G);
      tensors.push_back({k, r, b});
    }
    nn::Recurrent<float> layer({nn::Recurrent<float>::Cell::kLstm, g.steps, g.channels, g.units, true}, tensors, g.batch);
    OneDnnLstm dnn(g, eng);
    std::vector<double> ours_ms, dnn_ms;
    Results a, b;
    for (int r = 0; r < repeats; ++r) {
      Clock::time_point t = Clock::now();
      a = ours_step(g, layer, params, at, x, dout);
      ours_ms.push_back(ms_since(t));
      t = Clock::now();
      b = dnn.step(x, kernel, recurrent, bias, dout);
      dnn_ms.push_back(ms_since(t));
    }
    const Results again = dnn.step(x, kernel, recurrent, bias, dout);
    const bool same = again.out == b.out && again.din == b.din && again.dkernel == b.dkernel && again.drecurrent == b.drecurrent &&
                      again.dbias == b.dbias;
    const double diff = std::max({relative_difference(a.out, b.out), relative_difference(a.din, b.din),
                                  relative_difference(a.dkernel, b.dkernel), relative_difference(a.drecurrent, b.drecurrent),
                                  relative_difference(a.dbias, b.dbias)});
    const double ours = median(ours_ms), theirs = median(dnn_ms);
    std::printf("%-34s %9.2f %9.2f %13.2f %10.1e %10s\n", g.name, ours, theirs, ours / theirs, diff, same ? "same bits" : "DIFFERS");
  }
  return 0;
}

}  // namespace
}  // namespace pstrain

int main(int argc, char** argv) { return pstrain::run(argc, argv); }
