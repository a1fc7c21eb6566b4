// The files of jobs in the coordinator's store: each job's trained model (model/<id>/<piece>) and
// its checkpoints (checkpoint/<id>/<step>/<piece>), in pieces of at most kMaxModelPieceBytes
// (stored_file.h), written through the store's KvWriter and read piece by piece for downloads.
// JobStore's file half: JobStore decides when a file exists (the record that lists it is
// written, synced, after its pieces); this class writes, reads and deletes the pieces.
//
// A file is complete when the piece after its last is absent: end_of_model/end_of_checkpoint
// give the write that deletes it, which JobStore puts in the record's batch, so a file written
// again shorter never reads on into its old pieces.
//
// Thread rules: thread-safe (the KvStore and KvWriter are). Reads of a file flush the writer
// first (a file of this run may still be on its way to the disk) and so may block: call them
// off every event loop. write_checkpoint_piece blocks until its piece is written.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "common/storage/kv_store.h"
#include "coordinator/store/kv_writer.h"
#include "coordinator/base/stored_file.h"

namespace pstrain {

class JobFiles {
 public:
  JobFiles(KvStore& kv, KvWriter& writer) : kv_(kv), writer_(writer) {}

  // Piece `index` of job `id`'s model, queued (moved into the writer); `written` (if given) runs
  // on the writer thread once it is on disk.
  void write_model_piece(const std::string& id, size_t index, std::string piece, std::function<void()> written = {});
  KvStore::Write end_of_model(const std::string& id, size_t pieces) const;
  // The model of `bytes` bytes, whole (one copy, the caller's) or to be read piece by piece.
  // Models stored before they were cut into pieces (one value, job/<id>/model) are read too.
  std::optional<std::string> model(const std::string& id, int64_t bytes) const;
  std::optional<StoredFile> model_pieces(const std::string& id, int64_t bytes) const;

  // Piece `index` of the checkpoint at `step`; returns once it is written, so a streamed file
  // holds one piece in memory at a time.
  void write_checkpoint_piece(const std::string& id, int64_t step, size_t index, std::string piece);
  KvStore::Write end_of_checkpoint(const std::string& id, int64_t step, size_t pieces) const;
  std::optional<std::string> checkpoint(const std::string& id, int64_t step, int64_t bytes) const;
  std::optional<StoredFile> checkpoint_pieces(const std::string& id, int64_t step, int64_t bytes) const;
  // Queues the deletion of every piece of the checkpoint at `step`.
  void erase_checkpoint(const std::string& id, int64_t step);

 private:
  // The pieces under `prefix` (0, 1, ...) until one is missing, whole; nullopt unless they add
  // up to `bytes`.
  std::optional<std::string> read_pieces(const std::string& prefix, int64_t bytes) const;
  StoredFile pieces_under(const std::string& prefix, int64_t bytes) const;

  KvStore& kv_;
  KvWriter& writer_;
};

}  // namespace pstrain
