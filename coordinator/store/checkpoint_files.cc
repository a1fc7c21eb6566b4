#include "coordinator/store/checkpoint_files.h"

#include <kj/debug.h>

#include <algorithm>
#include <memory>

#include "common/storage/chunk_snapshot.h"
#include "common/base/cross_thread.h"
#include "common/engine/model_spec.h"
#include "common/engine/optim/optimizer.h"

namespace pstrain {
namespace {

// Runs `work` on `thread` and resolves (or rejects, with the exception's message) on the
// caller's loop.
template <typename T>
kj::Promise<T> on_thread(TaskThread& thread, std::function<T()> work) {
  auto paf = make_cross_thread_paf<T>();
  thread.post([fulfiller = paf.fulfiller, work = std::move(work)]() mutable {
    try {
      fulfiller->fulfill(work());
    } catch (const std::exception& e) {
      fulfiller->reject(KJ_EXCEPTION(FAILED, kj::str(e.what())));
    }
  });
  return kj::mv(paf.promise);
}

}  // namespace

StreamedFile stream_checkpoint(const ParamLayout& layout, const std::vector<ChunkInfo>& chunks, const CheckpointIo& io,
                               const Metadata& metadata, size_t max_piece_bytes) {
  if (max_piece_bytes == 0) throw Error("a piece of the file must hold at least one byte");
  // Each chunk's position in its server's replica (key order), and each tensor's chunks by offset.
  std::vector<size_t> position(chunks.size());
  std::vector<std::vector<const ChunkInfo*>> of_param(layout.params().size());
  {
    std::vector<size_t> count;
    for (const ChunkInfo& c : chunks) {  // chunks[k].key == k
      if (c.key >= chunks.size()) throw Error("chunk " + std::to_string(c.key) + " is outside the chunk table");
      if (c.server >= count.size()) count.resize(c.server + 1, 0);
      position[c.key] = count[c.server]++;
      if (c.param >= of_param.size()) throw Error("chunk " + std::to_string(c.key) + " is of no tensor of the model");
      of_param[c.param].push_back(&c);
    }
  }
  for (size_t p = 0; p < of_param.size(); ++p) {
    auto& list = of_param[p];
    std::sort(list.begin(), list.end(), [](const ChunkInfo* a, const ChunkInfo* b) {
      return a->offset != b->offset ? a->offset < b->offset : a->server < b->server;
    });
    size_t covered = 0;
    for (size_t i = 0; i < list.size(); ++i) {
      const ChunkInfo* c = list[i];
      // A sparse table's pieces: in order of their first rows 0, 1, ..., their rows adding up to the table.
      if (c->is_table_piece() ? (c->offset != i || !fits_layout(*c, layout)) : c->offset != covered) break;
      covered += c->size;
    }
    if (covered != layout.params()[p].size) {
      throw Error("the chunks do not cover tensor '" + layout.params()[p].name + "'");
    }
  }

  StreamedFile out;
  out.pieces = 1;  // piece 0, the header, goes last
  std::string piece;
  const auto append = [&](const float* data, size_t n) {
    const char* bytes = reinterpret_cast<const char*>(data);
    size_t left = n * sizeof(float);
    while (left > 0) {
      if (piece.capacity() < max_piece_bytes && max_piece_bytes != SIZE_MAX) piece.reserve(max_piece_bytes);
      const size_t take = std::min(left, max_piece_bytes - piece.size());
      piece.append(bytes, take);
      bytes += take;
      left -= take;
      if (piece.size() == max_piece_bytes) {
        out.bytes += static_cast<int64_t>(piece.size());
        io.write_piece(out.pieces++, std::move(piece));
        piece = {};
      }
    }
  };

  // Pass 0: the parameters; pass s + 1: slot s of every parameter (the slots' names come with
  // the first chunk read).
  std::vector<std::string> slots;
  int64_t iterations = 0;
  bool first = true;
  // Chunk c's values (pass 0) or slot pass - 1, checked against the chunk table and the slots.
  const auto read = [&](const ChunkInfo& c, size_t pass) {
    const std::optional<std::string> blob = io.read_chunk(c, position[c.key]);
    if (!blob) throw Error("chunk " + std::to_string(c.key) + " is missing from the backup");
    std::optional<ChunkSnapshot> snapshot = decode_snapshot(*blob);
    if (!snapshot) throw Error("a chunk of the backup does not decode");
    if (snapshot->key != c.key || snapshot->values.size() != c.size) {
      throw Error("chunk " + std::to_string(c.key) + " of the backup has the wrong key or size");
    }
    auto& state = snapshot->optimizer_state;
    if (first) {
      for (const optim::Slot& slot : state.slots) slots.push_back(slot.name);
      first = false;
    }
    if (state.slots.size() != slots.size()) throw Error("the chunks of the backup have different optimizer slots");
    for (size_t i = 0; i < slots.size(); ++i) {
      if (state.slots[i].name != slots[i] || state.slots[i].values.size() != c.size) {
        throw Error("the chunks of the backup have different optimizer slots");
      }
    }
    iterations = std::max(iterations, state.iterations);
    if (pass > 0) return std::move(state.slots[pass - 1].values);
    return std::vector<float>(snapshot->values.begin(), snapshot->values.end());
  };
  std::vector<float> table;
  for (size_t pass = 0; pass <= slots.size(); ++pass) {
    for (size_t p = 0; p < of_param.size(); ++p) {
      const ParamInfo& info = layout.params()[p];
      if (!info.sparse) {
        for (const ChunkInfo* c : of_param[p]) {
          const std::vector<float> values = read(*c, pass);
          append(values.data(), values.size());
        }
        continue;
      }
      // A sparse table's rows are spread over its pieces (row r in piece r mod S): the table is
      // put together whole here, the one tensor this holds at once (DESIGN-NOTES "Sparse models").
      table.assign(info.size, 0.0f);
      for (const ChunkInfo* c : of_param[p]) {
        scatter_piece(*c, static_cast<size_t>(info.shape[1]), read(*c, pass).data(), table.data());
      }
      append(table.data(), table.size());
      table = {};
    }
  }
  if (!piece.empty()) {
    out.bytes += static_cast<int64_t>(piece.size());
    io.write_piece(out.pieces++, std::move(piece));
  }
  std::string head = safetensors_header(layout, slots, metadata, iterations);
  out.bytes += static_cast<int64_t>(head.size());
  io.write_piece(0, std::move(head));
  return out;
}

kj::Promise<StreamedFile> CheckpointFiles::assemble(ParamLayout layout, std::vector<ChunkInfo> chunks, CheckpointIo io,
                                                    Metadata metadata, size_t max_piece_bytes) {
  return on_thread<StreamedFile>(thread_, [layout = std::move(layout), chunks = std::move(chunks), io = std::move(io),
                                           metadata = std::move(metadata), max_piece_bytes] {
    return stream_checkpoint(layout, chunks, io, metadata, max_piece_bytes);
  });
}

kj::Promise<std::string> CheckpointFiles::model_from_checkpoint(std::function<std::optional<std::string>()> read_file,
                                                               ParamLayout layout, Metadata metadata) {
  return on_thread<std::string>(thread_, [read_file = std::move(read_file), layout = std::move(layout),
                                          metadata = std::move(metadata)] {
    std::optional<std::string> file = read_file();
    if (!file) throw Error("the checkpoint is gone");
    const std::optional<std::vector<float>> params = decode_safetensors(layout, *file);
    if (!params) throw Error("the checkpoint does not fit the job's model");
    file.reset();
    return encode_safetensors(layout, *params, metadata);
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
      const ParamInfo& info = layout.params()[c.param];
      const size_t at = info.offset + (c.is_table_piece() ? 0 : c.offset);  // (a piece's offset is its first row)
      // A range of a tensor, or a sparse table's piece: its rows (offset + k * stride).
      const auto cut = [&](const std::vector<float>& from, float* to) {
        if (c.is_table_piece()) {
          gather_piece(c, static_cast<size_t>(info.shape[1]), from.data() + at, to);
        } else {
          std::copy_n(from.data() + at, c.size, to);
        }
      };
      ChunkSnapshot snapshot;
      snapshot.key = c.key;
      snapshot.version = out.version;
      snapshot.values.resize(c.size);
      cut(state.params, snapshot.values.data());
      snapshot.optimizer_state = optimizer->make_state(c.size);
      if (resume && state.optimizer) {
        snapshot.optimizer_state.iterations = state.optimizer->iterations;
        for (size_t s = 0; s < snapshot.optimizer_state.slots.size(); ++s) {
          cut(state.optimizer->slots[s].values, snapshot.optimizer_state.slots[s].values.data());
        }
      }
      out.servers.at(c.server).push_back(encode_snapshot(snapshot));
    }
    return out;
  });
}

}  // namespace pstrain
