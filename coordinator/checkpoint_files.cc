#include "coordinator/checkpoint_files.h"

#include <kj/debug.h>

#include <memory>

#include "common/chunk_snapshot.h"
#include "common/model_spec.h"
#include "common/optim/optimizer.h"

namespace pstrain {
namespace {

// Runs `work` on `thread` and resolves (or rejects, with the exception's message) on the
// caller's loop.
template <typename T>
kj::Promise<T> on_thread(TaskThread& thread, std::function<T()> work) {
  auto paf = kj::newPromiseAndCrossThreadFulfiller<T>();
  thread.post([fulfiller = kj::mv(paf.fulfiller), work = std::move(work)]() mutable {
    try {
      fulfiller->fulfill(work());
    } catch (const std::exception& e) {
      fulfiller->reject(KJ_EXCEPTION(FAILED, kj::str(e.what())));
    }
  });
  return kj::mv(paf.promise);
}

}  // namespace

kj::Promise<std::vector<std::string>> CheckpointFiles::assemble(ParamLayout layout, std::vector<ChunkInfo> chunks,
                                                                std::vector<std::string> blobs, Metadata metadata,
                                                                size_t max_piece_bytes) {
  return on_thread<std::vector<std::string>>(thread_, [layout = std::move(layout), chunks = std::move(chunks),
                                                       blobs = std::move(blobs), metadata = std::move(metadata),
                                                       max_piece_bytes]() mutable {
    std::vector<float> params(layout.total_size(), 0.0f);
    optim::OptimizerState optimizer;
    std::vector<bool> seen(chunks.size(), false);
    for (std::string& blob : blobs) {
      const auto snapshot = decode_snapshot(blob);
      if (!snapshot || snapshot->key >= chunks.size()) throw Error("a chunk of the backup does not decode");
      const ChunkInfo& c = chunks[snapshot->key];
      if (snapshot->values.size() != c.size || c.param >= layout.params().size()) {
        throw Error("chunk " + std::to_string(c.key) + " of the backup has the wrong size");
      }
      const size_t at = layout.params()[c.param].offset + c.offset;
      std::copy(snapshot->values.begin(), snapshot->values.end(), params.begin() + static_cast<std::ptrdiff_t>(at));
      const auto& slots = snapshot->optimizer_state.slots;
      if (optimizer.slots.empty()) {
        for (const optim::Slot& s : slots) optimizer.slots.push_back({s.name, std::vector<float>(layout.total_size())});
      }
      if (slots.size() != optimizer.slots.size()) throw Error("the chunks of the backup have different optimizer slots");
      for (size_t s = 0; s < slots.size(); ++s) {
        std::copy(slots[s].values.begin(), slots[s].values.end(),
                  optimizer.slots[s].values.begin() + static_cast<std::ptrdiff_t>(at));
      }
      optimizer.iterations = std::max(optimizer.iterations, snapshot->optimizer_state.iterations);
      seen[snapshot->key] = true;
      blob = {};  // freed as we go: the file is built next
    }
    for (size_t k = 0; k < seen.size(); ++k) {
      if (!seen[k]) throw Error("chunk " + std::to_string(k) + " is missing from the backup");
    }
    return encode_safetensors_pieces(layout, params, metadata, max_piece_bytes, &optimizer);
  });
}

kj::Promise<StartingShards> CheckpointFiles::starting_shards(std::function<std::optional<std::string>()> read_file,
                                                             JobSpec spec, std::vector<ChunkInfo> chunks,
                                                             uint32_t servers, uint64_t steps_per_epoch) {
  return on_thread<StartingShards>(thread_, [read_file = std::move(read_file), spec = std::move(spec),
                                             chunks = std::move(chunks), servers, steps_per_epoch] {
    const ParamLayout layout = make_param_layout(spec.model);
    const auto optimizer = optim::make_optimizer(spec.optimizer);
    const bool resume = spec.init_from.optimizer_state;
    std::vector<std::string> slot_names;
    for (const optim::Slot& s : optimizer->make_state(0).slots) slot_names.push_back(s.name);
    std::optional<std::string> file = read_file();
    if (!file) throw Error("the file to start from is gone");
    ModelState state = decode_model_state(layout, *file, resume ? slot_names : std::vector<std::string>{});
    file.reset();
    StartingShards out;
    if (resume) {
      if (!slot_names.empty() && !state.optimizer) {
        throw Error("it has no optimizer state for " + std::string(optimizer_type_name(spec.optimizer.type)) +
                    " (a checkpoint of a job with the same optimizer has; a model file has not): "
                    "start with \"optimizer_state\": false to fine-tune from its parameters");
      }
      const auto step = state.metadata.find("step");
      if (step == state.metadata.end()) throw Error("its metadata has no \"step\" to resume from");
      try {
        out.version = std::stoull(step->second);
      } catch (const std::exception&) {
        throw Error("its metadata's \"step\" is not a number: " + step->second);
      }
      const uint64_t total = steps_per_epoch * static_cast<uint64_t>(spec.training.epochs);
      if (out.version >= total) {
        throw Error("it is at step " + std::to_string(out.version) + " and the job has " + std::to_string(total) +
                    " steps (" + std::to_string(spec.training.epochs) +
                    " epochs, the total when resuming): nothing to train");
      }
      out.epoch = static_cast<int64_t>(out.version / std::max<uint64_t>(1, steps_per_epoch));
    }
    out.servers.resize(servers);
    for (const ChunkInfo& c : chunks) {
      const size_t at = layout.params()[c.param].offset + c.offset;
      ChunkSnapshot snapshot;
      snapshot.key = c.key;
      snapshot.version = out.version;
      snapshot.values.assign(state.params.begin() + static_cast<std::ptrdiff_t>(at),
                             state.params.begin() + static_cast<std::ptrdiff_t>(at + c.size));
      snapshot.optimizer_state = optimizer->make_state(c.size);
      if (resume && state.optimizer) {
        snapshot.optimizer_state.iterations = state.optimizer->iterations;
        for (size_t s = 0; s < snapshot.optimizer_state.slots.size(); ++s) {
          const std::vector<float>& from = state.optimizer->slots[s].values;
          std::copy(from.begin() + static_cast<std::ptrdiff_t>(at), from.begin() + static_cast<std::ptrdiff_t>(at + c.size),
                    snapshot.optimizer_state.slots[s].values.begin());
        }
      }
      out.servers.at(c.server).push_back(encode_snapshot(snapshot));
    }
    return out;
  });
}

}  // namespace pstrain
