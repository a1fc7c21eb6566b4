#include "common/engine/nn/onednn_matmul.h"

#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/base/error.h"
#include "common/engine/nn/onednn_conv.h"
#include "common/engine/simd/bf16_product.h"

#ifdef PSTRAIN_WITH_ONEDNN
#include <oneapi/dnnl/dnnl.hpp>

#include "common/engine/nn/onednn_one_thread.h"
#include "common/engine/nn/onednn_plans.h"
#endif

namespace pstrain::nn {

#ifdef PSTRAIN_WITH_ONEDNN

using dnnl::memory;
using Tag = memory::format_tag;
using Type = memory::data_type;

struct OneDnnMatmul::Impl {
  // One product's primitive for one batch size. In bfloat16, src (float32, the caller's) is rounded
  // into src_lp and the kernel (float32 [in, out] row-major, seen as the product needs it) into
  // weights; in float32 the primitive reads the caller's memory as it lies.
  struct Product {
    memory::desc src, user_weights, dst;
    memory src_lp, weights;
    std::optional<dnnl::reorder> to_src_lp, to_weights;
    // > 0: the primitive's weights are in BA16a<pair_block>b2a, which simd::round_to_pair_blocks
    // writes (at twice the speed of oneDNN's reorder into that layout) instead of to_weights.
    int64_t pair_block = 0;
    int64_t k = 0, n = 0;
    dnnl::matmul matmul;
  };
  struct Plan {
    Product forward;
    std::optional<Product> backward_data;
    const float* forward_src = nullptr;  // the input forward.src_lp holds rounded (bfloat16)
  };

  int64_t in, out;
  bool relu, bf16;
  dnnl::engine engine{dnnl::engine::kind::cpu, 0};
  dnnl::stream stream{engine};
  BoundedPlans<Plan> plans;
  std::vector<memory> kernels;  // the rounded kernels, by layout (at most a few)
  // The input gradient's rounded kernel ([in, out] as it lies) written by the forward's pass over
  // the kernel with its blocked copy, once an input gradient has been asked for (a layer on the
  // model's input never is): `plain_of` is the kernel it was rounded from, null when the last
  // forward did not write it. Between a forward and its backward the kernel does not change (the
  // parameters are a step's), so the input gradient takes that copy instead of rounding again.
  bool plain_wanted = false;
  const float* plain_of = nullptr;

  Impl(int64_t in_size, int64_t out_size, bool with_relu, bool in_bf16)
      : in(in_size), out(out_size), relu(with_relu), bf16(in_bf16) {}

  // rows x k times k x n: src [rows, k] row-major; the kernel seen as [k, n] with `kernel_tag`
  // (ab: the kernel itself; ba: its transpose); dst [rows, n] row-major, with the bias.
  Product product(int64_t rows, int64_t k, int64_t n, Tag kernel_tag, bool with_bias, bool with_relu) {
    Product p;
    p.src = memory::desc({rows, k}, Type::f32, Tag::ab);
    p.user_weights = memory::desc({k, n}, Type::f32, kernel_tag);
    p.dst = memory::desc({rows, n}, Type::f32, Tag::ab);
    const memory::desc src_op = bf16 ? memory::desc({rows, k}, Type::bf16, Tag::ab) : p.src;
    // In bfloat16 the forward lets the primitive pick the kernel's layout (a blocked one: plain
    // [in, out] was 6-10x slower for it), the input gradient reads the rounded kernel as it lies,
    // transposed (as fast as blocked there, and its rounding is then a plain conversion, where a
    // transposing reorder cost as much as the product: docs/BENCHMARKS.md).
    const memory::desc weights_op = !bf16                  ? p.user_weights
                                    : kernel_tag == Tag::ab ? memory::desc({k, n}, Type::bf16, Tag::any)
                                                            : memory::desc({k, n}, Type::bf16, kernel_tag);
    dnnl::primitive_attr attr;
    if (with_relu) {
      dnnl::post_ops ops;
      ops.append_eltwise(1.0f, dnnl::algorithm::eltwise_relu, 0.0f, 0.0f);
      attr.set_post_ops(ops);
    }
    const auto pd = with_bias ? dnnl::matmul::primitive_desc(
                                    dnnl::matmul::desc(src_op, weights_op, memory::desc({1, n}, Type::f32, Tag::ab), p.dst),
                                    attr, engine)
                              : dnnl::matmul::primitive_desc(dnnl::matmul::desc(src_op, weights_op, p.dst), attr, engine);
    p.matmul = dnnl::matmul(pd);
    if (bf16) {
      p.src_lp = memory(src_op, engine);
      p.weights = rounded_kernel(pd.weights_desc());
      p.k = k;
      p.n = n;
      if (kernel_tag == Tag::ab) p.pair_block = pair_block_of(pd.weights_desc(), k, n);
      p.to_src_lp = dnnl::reorder(memory(p.src, engine, nullptr), p.src_lp);
      p.to_weights = dnnl::reorder(memory(p.user_weights, engine, nullptr), p.weights);
    }
    return p;
  }

  // B when `d` is the [k, n] bfloat16 layout BA16a<B>b2a, else 0.
  static int64_t pair_block_of(const memory::desc& d, int64_t k, int64_t n) {
    const std::pair<int64_t, Tag> layouts[] = {
        {16, Tag::BA16a16b2a}, {32, Tag::BA16a32b2a}, {48, Tag::BA16a48b2a}, {64, Tag::BA16a64b2a}};
    for (const auto& [block, tag] : layouts) {
      if (d == memory::desc({k, n}, Type::bf16, tag)) return block;
    }
    return 0;
  }

  Plan& plan(int64_t batch) {
    if (Plan* known = plans.get(batch)) return *known;
    return plans.add(batch, Plan{product(batch, in, out, Tag::ab, true, relu), std::nullopt});
  }

  // The bfloat16 kernel in the layout `d`: one buffer per layout, shared by every batch size's
  // products (each call rounds the kernel into it afresh, on this object's one thread), so the
  // copies do not multiply with the batch sizes a run meets.
  memory rounded_kernel(const memory::desc& d) {
    for (const memory& m : kernels) {
      if (m.get_desc() == d) return m;
    }
    kernels.emplace_back(d, engine);
    return kernels.back();
  }

  memory wrap(const memory::desc& d, const float* data) { return memory(d, engine, const_cast<float*>(data)); }

  memory plain_kernel() { return rounded_kernel(memory::desc({out, in}, Type::bf16, Tag::ba)); }

  // The product's operands: in bfloat16 the caller's rounded into the product's copies, in
  // float32 the caller's memory itself. `forward`: the forward's product (which may write the
  // input gradient's kernel too), else the input gradient's (which may find it written).
  std::pair<memory, memory> operands(Product& p, const float* kernel, const float* src, bool forward) {
    memory user_weights = wrap(p.user_weights, kernel), user_src = wrap(p.src, src);
    if (!bf16) return {user_src, user_weights};
    if (forward) plain_of = nullptr;
    if (p.pair_block > 0) {
      auto* plain = plain_wanted ? static_cast<uint16_t*>(plain_kernel().get_data_handle()) : nullptr;
      simd::round_to_pair_blocks(kernel, p.k, p.n, p.n, p.pair_block, p.weights.get_data_handle(), plain);
      if (plain != nullptr) plain_of = kernel;
    } else if (forward || plain_of != kernel || p.weights.get_data_handle() != plain_kernel().get_data_handle()) {
      p.to_weights->execute(stream, user_weights, p.weights);
      // (The plain copy, if that was it, now holds this kernel: only a forward vouches for it.)
      if (!forward) plain_of = nullptr;
    }
    p.to_src_lp->execute(stream, user_src, p.src_lp);
    return {p.src_lp, p.weights};
  }
};

namespace {

template <typename F>
void guarded(const char* what, int64_t in, int64_t out, const F& f) {
  const OneThread one;
  try {
    f();
  } catch (const dnnl::error& e) {
    throw Error(std::string("oneDNN matmul (") + what + ", " + std::to_string(in) + " x " + std::to_string(out) +
                "): " + e.what());
  }
}

}  // namespace

bool onednn_matmul_preferred() {
  if (!onednn_preferred()) return false;  // (which applies PSTRAIN_CPU_TARGET's cap first)
  const auto isa = static_cast<unsigned>(dnnl::get_effective_cpu_isa());
  const auto avx512 = static_cast<unsigned>(dnnl::cpu_isa::avx512_core);
  return (isa & avx512) == avx512;
}

OneDnnMatmul::OneDnnMatmul(int64_t in, int64_t out, bool relu, bool bf16) {
  if (bf16 && !onednn_bf16()) {
    throw Error(std::string("a bfloat16 matmul needs AVX512-BF16 or AMX; oneDNN runs ") + onednn_isa() + " here");
  }
  impl_ = std::make_unique<Impl>(in, out, relu, bf16);
}
OneDnnMatmul::~OneDnnMatmul() = default;

void OneDnnMatmul::forward(const float* kernel, const float* bias, const float* x, int64_t batch, float* y) {
  guarded("forward", impl_->in, impl_->out, [&] {
    Impl& m = *impl_;
    Impl::Plan& plan = m.plan(batch);
    Impl::Product& p = plan.forward;
    const auto [src, weights] = m.operands(p, kernel, x, /*forward=*/true);
    plan.forward_src = m.bf16 ? x : nullptr;
    p.matmul.execute(m.stream, {{DNNL_ARG_SRC, src},
                                {DNNL_ARG_WEIGHTS, weights},
                                {DNNL_ARG_BIAS, m.wrap(memory::desc({1, m.out}, Type::f32, Tag::ab), bias)},
                                {DNNL_ARG_DST, m.wrap(p.dst, y)}});
    m.stream.wait();
  });
}

void OneDnnMatmul::backward_data(const float* kernel, const float* dy, int64_t batch, float* dx) {
  guarded("input gradient", impl_->in, impl_->out, [&] {
    Impl& m = *impl_;
    Impl::Plan& plan = m.plan(batch);
    // dx [batch, in] = dy [batch, out] x kernel^T: the [in, out] kernel seen as [out, in] (ba).
    if (!plan.backward_data) plan.backward_data = m.product(batch, m.out, m.in, Tag::ba, false, false);
    Impl::Product& p = *plan.backward_data;
    m.plain_wanted = true;
    const auto [src, weights] = m.operands(p, kernel, dy, /*forward=*/false);
    p.matmul.execute(m.stream, {{DNNL_ARG_SRC, src}, {DNNL_ARG_WEIGHTS, weights}, {DNNL_ARG_DST, m.wrap(p.dst, dx)}});
    m.stream.wait();
  });
}

bool OneDnnMatmul::rounds_kernel_itself(int64_t batch) {
  bool ours = false;
  guarded("forward", impl_->in, impl_->out, [&] { ours = impl_->plan(batch).forward.pair_block > 0; });
  return ours;
}

const uint16_t* OneDnnMatmul::rounded_input(int64_t batch, const float* x) {
  Impl::Plan* plan = impl_->plans.get(batch);
  if (plan == nullptr || plan->forward_src == nullptr || plan->forward_src != x) return nullptr;
  return static_cast<const uint16_t*>(plan->forward.src_lp.get_data_handle());
}

#else  // no oneDNN in this build

bool onednn_matmul_preferred() { return false; }
struct OneDnnMatmul::Impl {};
OneDnnMatmul::OneDnnMatmul(int64_t, int64_t, bool, bool) { throw Error("this build has no oneDNN (PSTRAIN_ONEDNN=OFF)"); }
OneDnnMatmul::~OneDnnMatmul() = default;
void OneDnnMatmul::forward(const float*, const float*, const float*, int64_t, float*) {}
void OneDnnMatmul::backward_data(const float*, const float*, int64_t, float*) {}
bool OneDnnMatmul::rounds_kernel_itself(int64_t) { return false; }
const uint16_t* OneDnnMatmul::rounded_input(int64_t, const float*) { return nullptr; }

#endif

}  // namespace pstrain::nn
