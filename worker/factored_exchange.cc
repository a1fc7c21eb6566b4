#include "worker/factored_exchange.h"

#include <kj/debug.h>

#include <algorithm>
#include <cstring>

#include "common/engine/compression.h"

namespace pstrain {
namespace {

// A server that does not say which product it multiplied a mixed-precision layer's factors out
// with (PushFactorsResults.productBf16) may have used float32's, and its values would drift from
// the trainer's: fail instead. Versions are not negotiated, so this refuses every server older
// than the field, also the ones that did honour PushFactorsParams.bf16: servers are upgraded
// before workers (docs/CLUSTER.md).
void require_product(bool bf16, proto::ParameterServer::PushFactorsResults::Reader r) {
  KJ_REQUIRE(!bf16 || r.getProductBf16(),
             "the server multiplied a bfloat16 layer's factors in float32 (a server older than this worker)");
}

std::vector<size_t> unfactored_chunks(const FactorPlan& plan, size_t chunks) {
  std::vector<size_t> unfactored;
  for (size_t k = 0; k < chunks; ++k) {
    if (!plan.is_factored_chunk(k)) unfactored.push_back(k);
  }
  return unfactored;
}

std::vector<size_t> group_offsets(const FactorPlan& plan) {
  std::vector<size_t> offsets;
  for (const FactorPlan::Group& g : plan.groups()) offsets.push_back(g.param_offset);
  return offsets;
}

}  // namespace

FactoredExchange::FactoredExchange(ServerChunks& servers, const nn::DataParallelModel<float>& model,
                                   InputSparsity sparsity, FactorPlan plan)
    : servers_(servers),
      model_(model),
      rows_(std::move(sparsity), servers.chunks().size()),
      plan_(std::move(plan)),
      chunk_pushes_(servers, unfactored_chunks(plan_, servers.chunks().size()), &rows_),
      group_order_(group_offsets(plan_)),
      group_buffers_(plan_.groups().size()),
      deltas_(model.layout().params().size()),
      deltas_round_(model.layout().params().size(), 0) {
  KJ_REQUIRE(plan_.groups().empty() || model_.replicas() == 1, "factored pushes need one compute replica");
}

std::string FactoredExchange::describe() const {
  const size_t groups = plan_.groups().size();
  return rows_.describe() + (groups == 0 ? "" : ", " + std::to_string(groups) + " factored kernel pushes per step");
}

const std::vector<bool>* FactoredExchange::factored_kernels() const {
  return plan_.groups().empty() ? nullptr : &plan_.factored_kernels();
}

void FactoredExchange::gradients_ready(kj::WaitScope& wait_scope, const GradientSlice& slice, size_t final_from) {
  size_t sent = chunk_pushes_.push_from(final_from, slice);
  sent += group_order_.send_from(final_from, [&](size_t g) { push_group(g, slice); });
  if (sent > 0) wait_scope.poll();  // let the event loop write them out
}

kj::Promise<void> FactoredExchange::push_rest(const GradientSlice& slice) {
  auto replies = chunk_pushes_.end_step(slice);
  group_order_.send_from(0, [&](size_t g) { push_group(g, slice); });
  group_order_.restart();
  for (auto& reply : group_replies_) replies.add(kj::mv(reply));
  group_replies_ = kj::Vector<kj::Promise<void>>();
  ++round_;
  return kj::joinPromises(replies.releaseAsArray());
}

const float* FactoredExchange::step_values(kj::WaitScope& wait_scope, uint64_t step) {
  return rows_.active() ? servers_.pull_exact(wait_scope, step) : servers_.values();
}

void FactoredExchange::push_group(size_t g, const GradientSlice& slice) {
  const FactorPlan::Group& group = plan_.groups()[g];
  GroupBuffers& buffers = group_buffers_[g];
  AlignedFloats& deltas = deltas_[group.param];
  const uint32_t examples = slice.examples;
  bool bf16 = false;  // the layer's kernel gradient is mixed precision's product
  // Copies, not views of the model's buffers: a takeover computes on the model while this push
  // may still be on its way out.
  if (examples > 0) {
    const auto factors = model_.first_replica().kernel_factors(group.param);
    bf16 = factors.bf16;
    plan_.gather_inputs(group, factors.inputs.data(), examples, buffers.rows, buffers.inputs);
    // Once per kernel and step: the kernel's other groups (other servers) send the same deltas,
    // and an earlier group's message may still be reading them.
    if (deltas_round_[group.param] != round_) {
      deltas.resize(rpc::padded_to_words(group.columns * examples));
      deltas.back() = 0.0f;  // (the pad, if any)
      std::copy_n(factors.deltas.data(), group.columns * examples, deltas.data());
      deltas_round_[group.param] = round_;
    }
  } else {
    buffers.rows.clear();
    buffers.inputs.clear();
    deltas.clear();
  }
  auto request = servers_.factors_request(group.server, group.chunks, slice);
  // Zero-copy, as in ServerChunks::push: the buffers stay untouched until the reply is in.
  const size_t delta_floats = group.columns * examples, input_floats = buffers.rows.size() * examples;
  const auto orphanage =
      capnp::Orphanage::getForMessageContaining(proto::ParameterServer::PushFactorsParams::Builder(request));
  if (delta_floats > 0) request.adoptDelta(rpc::reference_floats(orphanage, {deltas.data(), delta_floats}));
  request.setBf16(bf16);
  auto rows = request.initRows(static_cast<unsigned>(buffers.rows.size()));
  for (unsigned i = 0; i < buffers.rows.size(); ++i) rows.set(i, buffers.rows[i]);
  if (input_floats > 0) request.adoptInputs(rpc::reference_floats(orphanage, {buffers.inputs.data(), input_floats}));
  servers_.counts().pushed_bytes += (delta_floats + input_floats) * sizeof(float);
  if (partials_ != nullptr) {
    KJ_IF_MAYBE(floats, partials_->ask(g, request, orphanage)) {
      group_replies_.add(send_for_partial(g, request, *floats));
      return;
    }
  }
  group_replies_.add(send_for_values(g, request));
}

kj::Promise<void> FactoredExchange::send_for_values(size_t g, PushFactorsRequest& request) {
  const FactorPlan::Group& group = plan_.groups()[g];
  // Whole altogether if the ranges would make more parts than one message may carry.
  std::vector<InputSparsity::Ranges> want;
  size_t parts = 0;
  for (size_t k : group.chunks) {
    want.push_back(rows_.reply(k));
    parts += want.back() ? want.back()->size() : 1;
  }
  if (parts > rpc::kMaxRangesPerPart) want.assign(want.size(), std::nullopt);
  const bool whole = std::none_of(want.begin(), want.end(), [](const InputSparsity::Ranges& r) { return r.has_value(); });
  // Mixed precision's rounded kernels come back in bfloat16 (ServerChunks::reply_rounded).
  const bool rounded = whole && std::all_of(group.chunks.begin(), group.chunks.end(),
                                            [&](size_t k) { return servers_.replies_rounded(k); });
  request.setReplyBfloat16(rounded);
  if (!whole) {
    auto wanted = request.initReplyRanges(static_cast<unsigned>(want.size()));
    for (unsigned i = 0; i < want.size(); ++i) {
      if (want[i]) {
        rpc::set_ranges(wanted[i].initRanges(static_cast<unsigned>(want[i]->size())), *want[i]);
      } else {
        wanted[i].setWhole();
      }
    }
  }
  const bool bf16 = request.asReader().getBf16();
  return request.send().then([this, g, want = std::move(want), bf16](
                                 capnp::Response<proto::ParameterServer::PushFactorsResults>&& r) {
    const FactorPlan::Group& group = plan_.groups()[g];
    require_product(bf16, r);
    const auto versions = r.getVersions();
    KJ_REQUIRE(versions.size() == group.chunks.size(), "reply has the wrong number of versions", versions.size());
    if (r.getReply().isBfloat16()) {  // asked for: every chunk whole
      const auto rounded = r.getReply().getBfloat16();
      KJ_REQUIRE(rounded.size() == group.chunks.size(), "bfloat16 reply has the wrong number of parts", rounded.size());
      for (size_t i = 0; i < group.chunks.size(); ++i) {
        const size_t k = group.chunks[i];
        const auto part = rounded[static_cast<unsigned>(i)];
        KJ_REQUIRE(servers_.replies_rounded(k) && !want[i] && part.size() == servers_.chunks()[k].size * 2,
                   "unasked or wrong-sized bfloat16 reply", part.size());
        decode_bfloat16(part.begin(), {servers_.next_values(k), servers_.chunks()[k].size});
        servers_.counts().pulled_bytes += part.size();
        servers_.set_version(k, versions[static_cast<unsigned>(i)]);
      }
      servers_.counts().count_reply(r.getApplied());
      return;
    }
    KJ_REQUIRE(r.getReply().isValues(), "the server replied with a partial product, not the values asked for");
    const auto parts = r.getReply().getValues();
    unsigned part = 0;
    for (size_t i = 0; i < group.chunks.size(); ++i) {
      const size_t k = group.chunks[i];
      float* into = servers_.next_values(k);
      const std::vector<ChunkRange> whole{{0, servers_.chunks()[k].size}};
      for (const ChunkRange& range : want[i] ? *want[i] : whole) {
        KJ_REQUIRE(part < parts.size(), "reply has too few parts", parts.size());
        const auto values = rpc::part_view(parts[part++], range.size, "updated values");
        std::memcpy(into + range.offset, values.data(), values.size_bytes());
        servers_.counts().pulled_bytes += values.size_bytes();
      }
      servers_.set_version(k, versions[static_cast<unsigned>(i)]);
    }
    servers_.counts().count_reply(r.getApplied());
    KJ_REQUIRE(part == parts.size(), "reply has too many parts", parts.size());
  });
}

kj::Promise<void> FactoredExchange::send_for_partial(size_t g, PushFactorsRequest& request, size_t partial_floats) {
  servers_.counts().pushed_bytes += request.asReader().getNext().getForward().getInputs().size();
  const bool bf16 = request.asReader().getBf16();
  return request.send().then(
      [this, g, partial_floats, bf16](capnp::Response<proto::ParameterServer::PushFactorsResults>&& r) {
        const FactorPlan::Group& group = plan_.groups()[g];
        require_product(bf16, r);
        const auto versions = r.getVersions();
        KJ_REQUIRE(versions.size() == group.chunks.size(), "reply has the wrong number of versions", versions.size());
        partials_->take(g, r, partial_floats);
        for (size_t i = 0; i < group.chunks.size(); ++i) {
          servers_.set_version(group.chunks[i], versions[static_cast<unsigned>(i)]);
        }
        servers_.counts().count_reply(r.getApplied());
        servers_.counts().pulled_bytes += r.getReply().getPartial().size();
      });
}

}  // namespace pstrain
