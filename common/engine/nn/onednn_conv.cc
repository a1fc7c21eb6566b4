#include "common/engine/nn/onednn_conv.h"

#include <cstdlib>
#include <map>
#include <mutex>
#include <optional>
#include <string>

#include "common/base/error.h"
#include "common/engine/simd/cpu_target.h"

#ifdef PSTRAIN_WITH_ONEDNN
#include <oneapi/dnnl/dnnl.hpp>

#include "common/engine/nn/onednn_one_thread.h"
#include "common/engine/nn/onednn_plans.h"
#endif

namespace pstrain::nn {

#ifdef PSTRAIN_WITH_ONEDNN
namespace {

using dnnl::memory;
using Tag = memory::format_tag;

// PSTRAIN_CPU_TARGET caps oneDNN's instruction set too, unless ONEDNN_MAX_CPU_ISA says otherwise.
// Once, before the first primitive (oneDNN ignores it later).
void cap_isa_once() {
  static std::once_flag once;
  std::call_once(once, [] {
    if (std::getenv("ONEDNN_MAX_CPU_ISA") != nullptr) return;
    using simd::CpuTarget;
    if (simd::active_target() == simd::detected_target()) return;
    switch (simd::active_target()) {
      case CpuTarget::kX86_64: dnnl::set_max_cpu_isa(dnnl::cpu_isa::sse41); break;
      case CpuTarget::kX86_64_V3: dnnl::set_max_cpu_isa(dnnl::cpu_isa::avx2); break;
      default: break;
    }
  });
}

memory::dims nchw_dims(int64_t n, int64_t c, int64_t h, int64_t w) { return {n, c, h, w}; }

}  // namespace

bool onednn_available() { return true; }

bool onednn_preferred() {
  cap_isa_once();
  // oneDNN's instruction sets are bit masks, each holding those it extends.
  const auto isa = static_cast<unsigned>(dnnl::get_effective_cpu_isa());
  const auto avx2 = static_cast<unsigned>(dnnl::cpu_isa::avx2);
  return (isa & avx2) == avx2;
}

bool onednn_bf16() {
  cap_isa_once();
  const auto isa = static_cast<unsigned>(dnnl::get_effective_cpu_isa());
  const auto bf16 = static_cast<unsigned>(dnnl::cpu_isa::avx512_core_bf16);
  return (isa & bf16) == bf16;
}

const char* onednn_isa() {
  cap_isa_once();
  switch (dnnl::get_effective_cpu_isa()) {
    case dnnl::cpu_isa::sse41: return "sse41";
    case dnnl::cpu_isa::avx: return "avx";
    case dnnl::cpu_isa::avx2: return "avx2";
    case dnnl::cpu_isa::avx2_vnni: return "avx2_vnni";
    case dnnl::cpu_isa::avx512_core: return "avx512_core";
    case dnnl::cpu_isa::avx512_core_vnni: return "avx512_core_vnni";
    case dnnl::cpu_isa::avx512_core_bf16: return "avx512_core_bf16";
    case dnnl::cpu_isa::avx512_core_amx: return "avx512_core_amx";
    default: return "other";
  }
}

struct OneDnnConv::Impl {
  // One batch size's primitives (the last batch of an epoch and evaluation batches differ).
  struct Plan {
    memory::desc src, dst;  // float32 NHWC: the caller's
    // Mixed precision: the primitives' bfloat16 NHWC input and output gradient, and the reorders
    // that round the caller's float32 into them.
    memory src_lp, dst_lp;
    std::optional<dnnl::reorder> to_src_lp, to_dst_lp;
    dnnl::convolution_forward::primitive_desc fwd_pd;
    dnnl::convolution_forward fwd;
    memory fwd_weights;  // the kernel in the forward primitive's layout
    std::optional<dnnl::reorder> to_fwd_weights;
    std::optional<dnnl::convolution_backward_weights::primitive_desc> bwdw_pd;
    std::optional<dnnl::convolution_backward_weights> bwdw;
    memory bwdw_weights;
    std::optional<dnnl::reorder> from_bwdw_weights;
    std::optional<dnnl::convolution_backward_data::primitive_desc> bwdd_pd;
    std::optional<dnnl::convolution_backward_data> bwdd;
    memory bwdd_weights;
    std::optional<dnnl::reorder> to_bwdd_weights;
    // What src_lp / dst_lp hold: the rounded copy of the last forward's input (kept for its
    // backward, which the layer contract gives that same input), and of the output gradient the
    // kernel gradient just rounded (for the input gradient that follows with the same dy).
    // nullptr: nothing reusable.
    const float* src_lp_of = nullptr;
    const float* dst_lp_of = nullptr;
  };

  ConvGeometry g;
  bool relu;
  bool bf16;
  dnnl::engine engine{dnnl::engine::kind::cpu, 0};
  dnnl::stream stream{engine};
  memory::desc user_weights, bias;
  memory::dims strides, pad_l, pad_r;
  BoundedPlans<Plan> plans;

  Impl(const ConvGeometry& geometry, bool with_relu, bool in_bf16) : g(geometry), relu(with_relu), bf16(in_bf16) {
    user_weights = memory::desc({g.filters, g.channels, g.kernel_h, g.kernel_w}, memory::data_type::f32, Tag::hwio);
    bias = memory::desc({g.filters}, memory::data_type::f32, Tag::x);
    strides = {g.stride_h, g.stride_w};
    pad_l = {g.pad_top, g.pad_left};
    // TensorFlow's padding after: what makes the output size come out (none for valid padding,
    // where oneDNN's floor drops the rows no window fits, as TensorFlow does).
    const auto after = [](int64_t in, int64_t k, int64_t s, int64_t before, int64_t out) {
      const int64_t need = (out - 1) * s + k - in - before;
      return need > 0 ? need : int64_t{0};
    };
    pad_r = {after(g.height, g.kernel_h, g.stride_h, g.pad_top, g.out_h),
             after(g.width, g.kernel_w, g.stride_w, g.pad_left, g.out_w)};
  }

  // The products' operand type: bfloat16 in mixed precision.
  memory::data_type operand() const { return bf16 ? memory::data_type::bf16 : memory::data_type::f32; }
  memory::desc any_weights(memory::data_type t) const {
    return memory::desc({g.filters, g.channels, g.kernel_h, g.kernel_w}, t, Tag::any);
  }

  Plan& plan(int64_t batch) {
    if (Plan* known = plans.get(batch)) return *known;
    cap_isa_once();
    const memory::desc src(nchw_dims(batch, g.channels, g.height, g.width), memory::data_type::f32, Tag::nhwc);
    const memory::desc dst(nchw_dims(batch, g.filters, g.out_h, g.out_w), memory::data_type::f32, Tag::nhwc);
    // What the primitives read: the caller's float32, or bfloat16 copies.
    const memory::desc src_op(nchw_dims(batch, g.channels, g.height, g.width), operand(), Tag::nhwc);
    dnnl::primitive_attr attr;
    if (relu) {
      dnnl::post_ops ops;
      ops.append_eltwise(1.0f, dnnl::algorithm::eltwise_relu, 0.0f, 0.0f);
      attr.set_post_ops(ops);
    }
    auto fwd_pd = dnnl::convolution_forward::primitive_desc(
        dnnl::convolution_forward::desc(dnnl::prop_kind::forward_training, dnnl::algorithm::convolution_direct, src_op,
                                        any_weights(operand()), bias, dst, strides, pad_l, pad_r),
        attr, engine);
    Plan p{src, dst, {}, {}, {}, {}, fwd_pd, dnnl::convolution_forward(fwd_pd), memory(fwd_pd.weights_desc(), engine), {}, {},
           {}, {}, {}, {}, {}, {}, {}};
    if (bf16) {
      const memory::desc dst_op(nchw_dims(batch, g.filters, g.out_h, g.out_w), operand(), Tag::nhwc);
      p.src_lp = memory(src_op, engine);
      p.dst_lp = memory(dst_op, engine);
      p.to_src_lp = dnnl::reorder(memory(src, engine, nullptr), p.src_lp);
      p.to_dst_lp = dnnl::reorder(memory(dst, engine, nullptr), p.dst_lp);
    }
    if (fwd_pd.weights_desc() != user_weights) {
      p.to_fwd_weights = dnnl::reorder(memory(user_weights, engine, nullptr), p.fwd_weights);
    }
    return plans.add(batch, std::move(p));
  }

  void ensure_backward_weights(Plan& p) {
    if (p.bwdw) return;
    p.bwdw_pd = dnnl::convolution_backward_weights::primitive_desc(
        dnnl::convolution_backward_weights::desc(dnnl::algorithm::convolution_direct, bf16 ? p.src_lp.get_desc() : p.src,
                                                 any_weights(memory::data_type::f32), bias, bf16 ? p.dst_lp.get_desc() : p.dst,
                                                 strides, pad_l, pad_r),
        engine, p.fwd_pd);
    p.bwdw = dnnl::convolution_backward_weights(*p.bwdw_pd);
    p.bwdw_weights = memory(p.bwdw_pd->diff_weights_desc(), engine);
    if (p.bwdw_pd->diff_weights_desc() != user_weights) {
      p.from_bwdw_weights = dnnl::reorder(p.bwdw_weights, memory(user_weights, engine, nullptr));
    }
  }

  void ensure_backward_data(Plan& p) {
    if (p.bwdd) return;
    p.bwdd_pd = dnnl::convolution_backward_data::primitive_desc(
        dnnl::convolution_backward_data::desc(dnnl::algorithm::convolution_direct, p.src, any_weights(operand()),
                                              bf16 ? p.dst_lp.get_desc() : p.dst, strides, pad_l, pad_r),
        engine, p.fwd_pd);
    p.bwdd = dnnl::convolution_backward_data(*p.bwdd_pd);
    p.bwdd_weights = memory(p.bwdd_pd->weights_desc(), engine);
    if (p.bwdd_pd->weights_desc() != user_weights) {
      p.to_bwdd_weights = dnnl::reorder(memory(user_weights, engine, nullptr), p.bwdd_weights);
    }
  }

  memory wrap(const memory::desc& d, const float* data) {
    return memory(d, engine, const_cast<float*>(data));
  }
  // The primitive's input: x itself, or its bfloat16 copy: rounded now in a forward, the
  // forward's copy in the backward of that same input (the rounding of the same values: the
  // same bits either way).
  memory source(Plan& p, const float* x, bool forward) {
    if (!bf16) return wrap(p.src, x);
    if (forward || p.src_lp_of != x) {
      memory from = wrap(p.src, x);
      p.to_src_lp->execute(stream, from, p.src_lp);
    }
    p.src_lp_of = forward ? x : nullptr;  // one backward per forward
    p.dst_lp_of = nullptr;
    return p.src_lp;
  }
  // The primitive's output gradient: dy itself, or its bfloat16 copy: rounded by the kernel
  // gradient (`first`), reused by the input gradient that follows on the same dy.
  memory output_gradient(Plan& p, const float* dy, bool first) {
    if (!bf16) return wrap(p.dst, dy);
    if (first || p.dst_lp_of != dy) {
      memory from = wrap(p.dst, dy);
      p.to_dst_lp->execute(stream, from, p.dst_lp);
    }
    p.dst_lp_of = first ? dy : nullptr;
    return p.dst_lp;
  }
};

template <typename F>
void guarded(const char* what, const ConvGeometry& g, const F& f) {
  const OneThread one;
  try {
    f();
  } catch (const dnnl::error& e) {
    throw Error(std::string("oneDNN convolution (") + what + ", " + std::to_string(g.height) + "x" +
                std::to_string(g.width) + "x" + std::to_string(g.channels) + " kernel " + std::to_string(g.kernel_h) +
                "x" + std::to_string(g.kernel_w) + " x " + std::to_string(g.filters) + "): " + e.what());
  }
}

OneDnnConv::OneDnnConv(const ConvGeometry& g, bool relu, bool bf16) {
  if (bf16 && !onednn_bf16()) {
    throw Error(std::string("a bfloat16 convolution needs AVX512-BF16 or AMX; oneDNN runs ") + onednn_isa() + " here");
  }
  impl_ = std::make_unique<Impl>(g, relu, bf16);
}
OneDnnConv::~OneDnnConv() = default;

void OneDnnConv::forward(const float* kernel, const float* bias, const float* x, int64_t batch, float* y) {
  guarded("forward", impl_->g, [&] {
    Impl& m = *impl_;
    Impl::Plan& p = m.plan(batch);
    memory user = m.wrap(m.user_weights, kernel);
    if (p.to_fwd_weights) {
      p.to_fwd_weights->execute(m.stream, user, p.fwd_weights);
    }
    p.fwd.execute(m.stream, {{DNNL_ARG_SRC, m.source(p, x, /*forward=*/true)},
                             {DNNL_ARG_WEIGHTS, p.to_fwd_weights ? p.fwd_weights : user},
                             {DNNL_ARG_BIAS, m.wrap(m.bias, bias)},
                             {DNNL_ARG_DST, m.wrap(p.dst, y)}});
    m.stream.wait();
  });
}

void OneDnnConv::backward_weights(const float* x, const float* dy, int64_t batch, float* dkernel, float* dbias) {
  guarded("kernel gradient", impl_->g, [&] {
    Impl& m = *impl_;
    Impl::Plan& p = m.plan(batch);
    m.ensure_backward_weights(p);
    memory user = m.wrap(m.user_weights, dkernel);
    const memory source = m.source(p, x, /*forward=*/false);
    p.bwdw->execute(m.stream, {{DNNL_ARG_SRC, source},
                               {DNNL_ARG_DIFF_DST, m.output_gradient(p, dy, /*first=*/true)},
                               {DNNL_ARG_DIFF_WEIGHTS, p.from_bwdw_weights ? p.bwdw_weights : user},
                               {DNNL_ARG_DIFF_BIAS, m.wrap(m.bias, dbias)}});
    if (p.from_bwdw_weights) p.from_bwdw_weights->execute(m.stream, p.bwdw_weights, user);
    m.stream.wait();
  });
}

void OneDnnConv::backward_data(const float* kernel, const float* dy, int64_t batch, float* dx) {
  guarded("input gradient", impl_->g, [&] {
    Impl& m = *impl_;
    Impl::Plan& p = m.plan(batch);
    m.ensure_backward_data(p);
    memory user = m.wrap(m.user_weights, kernel);
    if (p.to_bwdd_weights) p.to_bwdd_weights->execute(m.stream, user, p.bwdd_weights);
    p.bwdd->execute(m.stream, {{DNNL_ARG_DIFF_DST, m.output_gradient(p, dy, /*first=*/false)},
                               {DNNL_ARG_WEIGHTS, p.to_bwdd_weights ? p.bwdd_weights : user},
                               {DNNL_ARG_DIFF_SRC, m.wrap(p.src, dx)}});
    m.stream.wait();
  });
}

#else  // no oneDNN in this build

struct OneDnnConv::Impl {};
bool onednn_available() { return false; }
bool onednn_preferred() { return false; }
bool onednn_bf16() { return false; }
const char* onednn_isa() { return "none"; }
OneDnnConv::OneDnnConv(const ConvGeometry&, bool, bool) { throw Error("this build has no oneDNN (PSTRAIN_ONEDNN=OFF)"); }
OneDnnConv::~OneDnnConv() = default;
void OneDnnConv::forward(const float*, const float*, const float*, int64_t, float*) {}
void OneDnnConv::backward_weights(const float*, const float*, int64_t, float*, float*) {}
void OneDnnConv::backward_data(const float*, const float*, int64_t, float*) {}

#endif

}  // namespace pstrain::nn
