// TrainingSession's exchange with the parameter servers: pulls, pushes (dense or row-sparse,
// see input_sparsity.h) and the step's replies. Thread rules: those of training_session.h.
#include <algorithm>
#include <cstring>

#include "common/log.h"
#include "worker/shard_reader.h"
#include "worker/training_session.h"

namespace pstrain {

void TrainingSession::pull_all(uint64_t min_version, AlignedFloats& into, std::vector<uint64_t>& versions,
                               bool exact) {
  into.resize(params_.size());
  versions.resize(chunks_.size());
  kj::Vector<kj::Promise<void>> replies;
  for (size_t k = 0; k < chunks_.size(); ++k) {
    auto request = servers_[chunks_[k].server].pullRequest();
    request.setJobId(job_id_);
    request.setKey(chunks_[k].key);
    request.setMinVersion(min_version);
    request.setExact(exact);
    replies.add(request.send().then([this, k, &into, &versions, exact, min_version](capnp::Response<proto::ParameterServer::PullResults>&& r) {
      const auto values = rpc::tensor_view(r.getValues(), chunks_[k].size, "pulled values");
      std::memcpy(into.data() + chunk_offsets_[k], values.data(), values.size_bytes());
      versions[k] = r.getVersion();
      KJ_REQUIRE(!exact || versions[k] == min_version, "server sent another version than the one asked for",
                 versions[k], min_version);
    }));
  }
  wait(kj::joinPromises(replies.releaseAsArray()));
}

void TrainingSession::push_chunk(size_t k, uint64_t step, uint32_t examples) {
  replies_.add(send_push(k, step, worker_index_, worker_count_, examples, grads_.data() + chunk_offsets_[k], true,
                         push_ranges_[k], reply_ranges_[k]));
}

kj::Promise<void> TrainingSession::send_push(size_t k, uint64_t step, uint32_t slice, uint32_t slice_count,
                                             uint32_t examples, const float* gradient, bool take_values,
                                             const InputSparsity::Ranges& ranges, const InputSparsity::Ranges& want) {
  auto request = servers_[chunks_[k].server].pushRequest();
  request.setJobId(job_id_);
  request.setKey(chunks_[k].key);
  request.setStep(step);
  request.setSlice(slice);
  request.setSliceCount(slice_count);
  request.setWorker(slice);
  request.setExamples(examples);
  request.setBaseVersion(versions_[k]);
  request.setGeneration(generation_);
  // Zero-copy: the message points into the gradient buffer, which stays untouched until every
  // reply is in (a reply implies its request was fully sent).
  if (ranges) {
    // Rows outside the ranges are exactly zero: they stay home.
    request.setSparseGradient(true);
    rpc::set_ranges(request.initGradientRanges(static_cast<unsigned>(ranges->size())), *ranges);
    auto parts = request.initGradientParts(static_cast<unsigned>(ranges->size()));
    for (unsigned i = 0; i < ranges->size(); ++i) {
      rpc::reference_part(parts, i, {gradient + (*ranges)[i].offset, (*ranges)[i].size});
      exchanged_bytes_ += (*ranges)[i].size * sizeof(float);
    }
  } else {
    rpc::reference_tensor(request.initGradient(), {gradient, chunks_[k].size});
    exchanged_bytes_ += chunks_[k].size * sizeof(float);
  }
  if (!take_values) {
    request.setSparseReply(true);  // with no ranges: an empty reply
  } else if (want) {
    request.setSparseReply(true);
    rpc::set_ranges(request.initReplyRanges(static_cast<unsigned>(want->size())), *want);
  }
  std::optional<std::vector<ChunkRange>> wanted = take_values ? want : std::nullopt;
  return request.send().then([this, k, take_values, wanted = std::move(wanted)](
                                 capnp::Response<proto::ParameterServer::PushResults>&& r) {
    if (!take_values) return;
    float* into = next_params_.data() + chunk_offsets_[k];
    if (wanted) {
      const auto parts = r.getValueParts();
      KJ_REQUIRE(parts.size() == wanted->size(), "reply has the wrong number of parts", parts.size(), wanted->size());
      for (unsigned i = 0; i < parts.size(); ++i) {
        const auto values = rpc::part_view(parts[i], (*wanted)[i].size, "updated values");
        std::memcpy(into + (*wanted)[i].offset, values.data(), values.size_bytes());
        exchanged_bytes_ += values.size_bytes();
      }
    } else {
      const auto values = rpc::tensor_view(r.getValues(), chunks_[k].size, "updated values");
      std::memcpy(into, values.data(), values.size_bytes());
      exchanged_bytes_ += values.size_bytes();
    }
    versions_[k] = r.getVersion();
    late_pushes_ += r.getApplied() ? 0 : 1;
  });
}

void TrainingSession::push_final(size_t final_from, uint64_t step, uint32_t examples) {
  const size_t before = pushed_ + groups_pushed_;
  while (pushed_ < push_order_.size() && chunk_offsets_[push_order_[pushed_]] >= final_from) {
    push_chunk(push_order_[pushed_++], step, examples);
  }
  const auto& groups = factor_plan_.groups();
  while (groups_pushed_ < group_order_.size() && groups[group_order_[groups_pushed_]].param_offset >= final_from) {
    push_factors(group_order_[groups_pushed_++], step, examples);
  }
  if (pushed_ + groups_pushed_ != before) wait_scope_.poll();  // let the event loop write them out
}

void TrainingSession::push_factors(size_t g, uint64_t step, uint32_t examples) {
  const FactorPlan::Group& group = factor_plan_.groups()[g];
  GroupBuffers& buffers = group_buffers_[g];
  AlignedFloats& deltas = factor_deltas_[group.param];
  // Copies, not views of the model's buffers: a takeover computes on the model while this push
  // may still be on its way out.
  if (examples > 0) {
    const auto factors = model_->first_replica().kernel_factors(group.param);
    factor_plan_.gather_inputs(group, factors.inputs.data(), examples, buffers.rows, buffers.inputs);
    // Once per kernel and step: the kernel's other groups (other servers) send the same deltas,
    // and an earlier group's message may still be reading them.
    if (deltas_round_[group.param] != exchange_round_) {
      deltas.resize(rpc::padded_to_words(group.columns * examples));
      deltas.back() = 0.0f;  // (the pad, if any)
      std::copy_n(factors.deltas.data(), group.columns * examples, deltas.data());
      deltas_round_[group.param] = exchange_round_;
    }
  } else {
    buffers.rows.clear();
    buffers.inputs.clear();
    deltas.clear();
  }
  auto request = servers_[group.server].pushFactorsRequest();
  request.setJobId(job_id_);
  auto keys = request.initKeys(static_cast<unsigned>(group.chunks.size()));
  auto base_versions = request.initBaseVersions(static_cast<unsigned>(group.chunks.size()));
  for (unsigned i = 0; i < group.chunks.size(); ++i) {
    keys.set(i, chunks_[group.chunks[i]].key);
    base_versions.set(i, versions_[group.chunks[i]]);
  }
  request.setStep(step);
  request.setSlice(worker_index_);
  request.setSliceCount(worker_count_);
  request.setWorker(worker_index_);
  request.setExamples(examples);
  request.setGeneration(generation_);
  // Zero-copy, as in send_push: the buffers stay untouched until the reply is in.
  const size_t delta_floats = group.columns * examples, input_floats = buffers.rows.size() * examples;
  const auto orphanage =
      capnp::Orphanage::getForMessageContaining(proto::ParameterServer::PushFactorsParams::Builder(request));
  if (delta_floats > 0) request.adoptDelta(rpc::reference_floats(orphanage, {deltas.data(), delta_floats}));
  auto rows = request.initRows(static_cast<unsigned>(buffers.rows.size()));
  for (unsigned i = 0; i < buffers.rows.size(); ++i) rows.set(i, buffers.rows[i]);
  if (input_floats > 0) request.adoptInputs(rpc::reference_floats(orphanage, {buffers.inputs.data(), input_floats}));
  exchanged_bytes_ += (delta_floats + input_floats) * sizeof(float);
  if (forward_ && forward_->planned() && static_cast<int>(group.param) == first_kernel_) {
    push_factors_forward(g, request, orphanage);
    return;
  }
  // The reply: the rows the next step reads where the sparse exchange knows them, else whole;
  // whole altogether if the ranges would make more parts than one message may carry.
  bool any_ranges = false;
  size_t parts = 0;
  for (size_t k : group.chunks) {
    any_ranges = any_ranges || reply_ranges_[k].has_value();
    parts += reply_ranges_[k] ? reply_ranges_[k]->size() : 1;
  }
  if (parts > rpc::kMaxRangesPerPart) {
    any_ranges = false;
    for (size_t k : group.chunks) reply_ranges_[k].reset();
  }
  if (any_ranges) {
    auto wanted = request.initReplyRanges(static_cast<unsigned>(group.chunks.size()));
    for (unsigned i = 0; i < group.chunks.size(); ++i) {
      const auto& ranges = reply_ranges_[group.chunks[i]];
      wanted[i].setWhole(!ranges.has_value());
      if (ranges) rpc::set_ranges(wanted[i].initRanges(static_cast<unsigned>(ranges->size())), *ranges);
    }
  }
  std::vector<InputSparsity::Ranges> want;
  for (size_t k : group.chunks) want.push_back(reply_ranges_[k]);
  replies_.add(request.send().then([this, g, want = std::move(want)](
                                       capnp::Response<proto::ParameterServer::PushFactorsResults>&& r) {
    const FactorPlan::Group& group = factor_plan_.groups()[g];
    const auto parts = r.getValueParts();
    const auto versions = r.getVersions();
    KJ_REQUIRE(versions.size() == group.chunks.size(), "reply has the wrong number of versions", versions.size());
    unsigned part = 0;
    for (size_t i = 0; i < group.chunks.size(); ++i) {
      const size_t k = group.chunks[i];
      float* into = next_params_.data() + chunk_offsets_[k];
      const std::vector<ChunkRange> whole{{0, chunks_[k].size}};
      for (const ChunkRange& range : want[i] ? *want[i] : whole) {
        KJ_REQUIRE(part < parts.size(), "reply has too few parts", parts.size());
        const auto values = rpc::part_view(parts[part++], range.size, "updated values");
        std::memcpy(into + range.offset, values.data(), values.size_bytes());
        exchanged_bytes_ += values.size_bytes();
      }
      versions_[k] = versions[static_cast<unsigned>(i)];
    }
    late_pushes_ += r.getApplied() ? 0 : 1;
    KJ_REQUIRE(part == parts.size(), "reply has too many parts", parts.size());
  }));
}

void TrainingSession::push_factors_forward(size_t g, PushFactorsRequest& request, const capnp::Orphanage& orphanage) {
  const size_t partial_floats = forward_->add_to_request(factor_plan_, g, request, orphanage);
  exchanged_bytes_ += request.asReader().getNextInputs().size();
  replies_.add(request.send().then([this, g, partial_floats](
                                       capnp::Response<proto::ParameterServer::PushFactorsResults>&& r) {
    const FactorPlan::Group& group = factor_plan_.groups()[g];
    const auto versions = r.getVersions();
    KJ_REQUIRE(versions.size() == group.chunks.size(), "reply has the wrong number of versions", versions.size());
    forward_->take_partial(group.server, r, partial_floats);
    for (size_t i = 0; i < group.chunks.size(); ++i) versions_[group.chunks[i]] = versions[static_cast<unsigned>(i)];
    late_pushes_ += r.getApplied() ? 0 : 1;
    exchanged_bytes_ += r.getPartial().size();
  }));
}

void TrainingSession::finish_push(uint64_t step, uint32_t examples) {
  for (; pushed_ < push_order_.size(); ++pushed_) push_chunk(push_order_[pushed_], step, examples);
  for (; groups_pushed_ < group_order_.size(); ++groups_pushed_) push_factors(group_order_[groups_pushed_], step, examples);
  auto all = kj::joinPromises(replies_.releaseAsArray()).fork();
  replies_ = kj::Vector<kj::Promise<void>>();
  pushed_ = groups_pushed_ = 0;
  ++exchange_round_;
  KJ_IF_MAYBE(arrived, takeover_arrived_) {
    // Sync: the step may not complete without a lost worker's slice: wait for whichever comes first.
    if (!takeover_ && spec_.training.mode == TrainingMode::kSync) {
      wait(all.addBranch().exclusiveJoin(arrived->addBranch()));
    }
  }
  kj::Promise<void> taken_over = kj::READY_NOW;
  if (takeover_ && takeover_->step < step) takeover_.reset();  // a step that completed anyway
  if (takeover_ && takeover_->step == step) {
    taken_over = take_over();
    takeover_.reset();
    takeover_arrived_ = nullptr;
  }
  wait(all.addBranch());
  wait(kj::mv(taken_over));
  std::swap(params_, next_params_);
  if (forward_) forward_->step_done();
}

void TrainingSession::plan_sparse_exchange(proto::Batch::Reader batch, ShardReader& reader, bool last_step_of_epoch) {
  const auto marked = [this](proto::Batch::Reader b) {
    const auto pixels = b.getPixels();
    KJ_REQUIRE(b.getExampleSize() == sparsity_.features() &&
                   pixels.size() == static_cast<size_t>(b.getSize()) * b.getExampleSize(),
               "batch does not match the model's input", b.getExampleSize(), pixels.size());
    sparsity_.mark_features(pixels.begin(), b.getSize(), b.getExampleSize(), &feature_mask_);
    return sparsity_.chunk_ranges(feature_mask_);
  };
  push_ranges_ = marked(batch);
  proto::Batch::Reader next;
  // Dense before an evaluation (it reads every row), and when the next batch is not here yet.
  if (forward_) forward_->plan_none();
  if (!last_step_of_epoch && reader.peek(&next) && next.getSize() > 0) {
    reply_ranges_ = marked(next);
    if (forward_) forward_->plan(next);
  } else {
    reply_ranges_.assign(chunks_.size(), std::nullopt);
  }
}

}  // namespace pstrain
