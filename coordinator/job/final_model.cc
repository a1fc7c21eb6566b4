#include "coordinator/job/final_model.h"

#include <algorithm>
#include <memory>
#include <string>

#include "common/base/cross_thread.h"
#include "common/base/log.h"
#include "common/engine/safetensors.h"

namespace pstrain {
namespace {

// What the model file holds, in its order, a pull at a time: a dense tensor's chunk, or a block
// of a sparse table's rows (gathered from its pieces).
struct FilePart {
  ChunkInfo chunk;              // a dense chunk (when table is null)
  const std::vector<ChunkInfo>* table = nullptr;  // a sparse table's pieces, by server
  size_t first = 0, count = 0, dim = 0;          // the block's rows
};

// The final parameters on their way from the servers to the model file: the parts in the file's
// order (tensor after tensor, each by offset, then the sparse tables row block by row block), the
// next to pull, and the piece being filled.
struct FinalModel {
  std::vector<std::vector<ChunkInfo>> tables;  // each sparse table's pieces
  std::vector<FilePart> order;
  size_t next = 0;
  std::string piece;
  size_t pieces = 1;  // piece 0 is the header, written last
  int64_t bytes = 0;
};

// Chunks pulled at once (about 1 MB each): the coordinator holds this many chunks and one piece
// of the model at a time, not the model. A sparse table comes in blocks of about as many floats.
constexpr size_t kFinalPullBatch = 8;
constexpr size_t kTableBlockFloats = 256 * 1024;

void plan_file(const ParamLayout& layout, const std::vector<ChunkInfo>& chunks, FinalModel& model) {
  std::vector<ChunkInfo> dense;
  std::vector<std::vector<ChunkInfo>> of_table(layout.params().size());
  for (const ChunkInfo& c : chunks) {
    if (c.is_table_piece()) {
      of_table[c.param].push_back(c);
    } else {
      dense.push_back(c);
    }
  }
  std::stable_sort(dense.begin(), dense.end(), [&](const ChunkInfo& a, const ChunkInfo& b) {
    const size_t at_a = layout.params()[a.param].offset + a.offset, at_b = layout.params()[b.param].offset + b.offset;
    return at_a < at_b;
  });
  for (const ChunkInfo& c : dense) model.order.push_back(FilePart{c});
  for (auto& pieces : of_table) {
    if (!pieces.empty()) model.tables.push_back(std::move(pieces));
  }
  // Sparse tables follow the dense tensors in the layout, in layout order (as their pieces' params).
  for (const std::vector<ChunkInfo>& pieces : model.tables) {
    const ParamInfo& info = layout.params()[pieces.front().param];
    const auto rows = static_cast<size_t>(info.shape[0]), dim = static_cast<size_t>(info.shape[1]);
    const size_t block = std::max<size_t>(1, kTableBlockFloats / dim);
    for (size_t first = 0; first < rows; first += block) {
      model.order.push_back(FilePart{{}, &pieces, first, std::min(block, rows - first), dim});
    }
  }
}

kj::Promise<void> collect_batch(JobContext& job, std::shared_ptr<FinalModel> model) {
  if (model->next == model->order.size() || job.state() != JobState::kRunning) return kj::READY_NOW;
  // A batch holds dense chunks or table blocks, not both.
  const bool tables = model->order[model->next].table != nullptr;
  size_t end = model->next;
  while (end < model->order.size() && end < model->next + kFinalPullBatch &&
         (model->order[end].table != nullptr) == tables) {
    ++end;
  }
  std::vector<ChunkInfo> chunks;
  kj::Vector<kj::Promise<kj::Array<float>>> blocks;
  for (size_t i = model->next; i < end; ++i) {
    const FilePart& part = model->order[i];
    if (part.table == nullptr) {
      chunks.push_back(part.chunk);
    } else {
      blocks.add(job.servers.pull_table_rows(*part.table, part.first, part.count, part.dim));
    }
  }
  model->next = end;
  auto pulled = !tables ? job.servers.pull_chunks(chunks) : kj::joinPromises(blocks.releaseAsArray());
  return pulled.then([&job, model](kj::Array<kj::Array<float>> values) -> kj::Promise<void> {
    // The pieces this batch fills go to the store; the next batch is pulled once they are on disk,
    // so a disk slower than the pulls does not pile the model up in the writer's queue.
    kj::Vector<kj::Promise<void>> written;
    for (const kj::Array<float>& v : values) {
      const char* data = reinterpret_cast<const char*>(v.begin());
      size_t left = v.size() * sizeof(float);
      while (left > 0) {
        const size_t max = job.options.file_piece_bytes;
        if (model->piece.capacity() < max) model->piece.reserve(max);
        const size_t n = std::min(left, max - model->piece.size());
        model->piece.append(data, n);
        data += n;
        left -= n;
        if (model->piece.size() == max) {
          auto paf = make_cross_thread_paf<void>();
          model->bytes += static_cast<int64_t>(model->piece.size());
          job.store.write_model_piece(job.id, model->pieces++, std::move(model->piece),
                                       [fulfiller = paf.fulfiller] { fulfiller->fulfill(); });
          model->piece = {};
          written.add(kj::mv(paf.promise));
        }
      }
    }
    return kj::joinPromises(written.releaseAsArray()).then([&job, model] { return collect_batch(job, model); });
  });
}

}  // namespace

kj::Promise<std::optional<StoredModel>> store_final_model(JobContext& job) {
  auto model = std::make_shared<FinalModel>();
  plan_file(job.layout, job.chunks, *model);
  return collect_batch(job, model).then([&job, model]() -> std::optional<StoredModel> {
    if (job.state() != JobState::kRunning) return std::nullopt;  // cancelled or failed meanwhile
    // The last piece and the header (piece 0, alone: the readers join the pieces).
    // Self-describing: the spec (model, optimizer, dataset), where it stopped, and which files it
    // was trained on, so the file can be used without the job (DESIGN-NOTES "Models").
    if (!model->piece.empty()) {
      model->bytes += static_cast<int64_t>(model->piece.size());
      job.store.write_model_piece(job.id, model->pieces++, std::move(model->piece));
    }
    std::string header = safetensors_header(
        job.layout, {}, job.model_file_metadata(job.spec.training.epochs, job.total_steps()), std::nullopt);
    model->bytes += static_cast<int64_t>(header.size());
    job.store.write_model_piece(job.id, 0, std::move(header));
    return StoredModel{model->pieces, model->bytes};
  });
}

kj::Promise<void> log_async_updates(JobContext& job) {
  if (job.sync()) return kj::READY_NOW;
  // In async mode a chunk's version counts the pushes it took in this timeline (a restore sets it
  // back to its backup's): at the end every chunk should have taken each planned step once. More
  // means steps were applied twice (after a recovery or a restart), fewer that some were skipped.
  return job.servers.versions()
      .then([&job](kj::Array<ServerVersions> versions) {
        uint64_t lowest = UINT64_MAX, highest = 0;
        for (const auto& v : versions) {
          lowest = std::min(lowest, v.lowest);
          highest = std::max(highest, v.highest);
        }
        const uint64_t planned = job.total_steps();
        PSLOG(kInfo) << "job " << job.id << ": async updates applied: every chunk took " << lowest << " to " << highest
                     << " push(es); planned steps: " << planned << " (" << (highest > planned ? highest - planned : 0)
                     << " more, " << (lowest < planned ? planned - lowest : 0) << " fewer)";
      })
      .catch_([&job](kj::Exception&& e) {
        PSLOG(kWarning) << "job " << job.id << ": could not count the updates applied: " << e.getDescription().cStr();
      });
}

}  // namespace pstrain
