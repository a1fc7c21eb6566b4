// Models that users uploaded (POST /v1/models): safetensors files written by pstrain (a downloaded
// model or checkpoint) or by anything else (numpy, PyTorch) with the tensors a model spec names.
// Each has an id ("model-<n>", never a job's id), the file as sent (in pieces of at most
// kMaxModelPieceBytes, one RocksDB value each) and a record: name, size, SHA-256, the tensors'
// names, dtypes and shapes, and the architecture (a model spec) when the file carries one in its
// "__metadata__" ("model": a model spec, or "spec": a job spec, as pstrain writes). A job starts
// from one with init_from {"model": ID} (tensors matched by name and shape); predictions and
// evaluations need the architecture.
//
// Records are kept in memory (loaded at construction) and read without touching the disk; add(),
// file() and erase() do blocking RocksDB I/O and are called off every event loop (the model
// service's thread, a job's loading task).
//
// Thread rules: thread-safe. Ownership: borrows the KvStore (may be null: nothing is persisted and
// files are kept in memory), which must outlive it.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/base/mutex.h"
#include "common/storage/kv_store.h"
#include "common/engine/safetensors.h"
#include "coordinator/base/stored_file.h"

namespace pstrain {

struct UploadedModel {
  std::string id;     // "model-<n>"
  std::string name;   // given at upload, else the file's metadata "name", else the id
  int64_t created_ms = 0;
  int64_t bytes = 0;
  std::string sha256;  // of the file as uploaded (lowercase hex)
  std::vector<SafetensorsTensor> tensors;  // every tensor of the file, in name order
  std::string model_json;  // the architecture (canonical model spec JSON), or empty when unknown
};

class ModelCatalog {
 public:
  static constexpr std::string_view kIdPrefix = "model-";

  explicit ModelCatalog(KvStore& kv);
  ModelCatalog(const ModelCatalog&) = delete;
  ModelCatalog& operator=(const ModelCatalog&) = delete;

  // Stores `file` and then its record (synced) under a new id, which the returned record holds.
  // A crash in between leaves pieces that no record claims (removed at the next start).
  UploadedModel add(UploadedModel record, std::string_view file);
  std::optional<UploadedModel> get(const std::string& id) const;
  std::vector<UploadedModel> list() const;  // in upload order
  // The file as uploaded, or nullopt (unknown id, or unreadable: its size does not match).
  std::optional<std::string> file(const std::string& id) const;
  // The same, to be read piece by piece (a download: stored_file.h).
  std::optional<StoredFile> file_pieces(const std::string& id) const;
  // Removes the record, then the file. False for an unknown id.
  bool erase(const std::string& id);

 private:
  KvStore& kv_;
  mutable Mutex mutex_;
  std::map<uint64_t, UploadedModel> models_ PS_GUARDED_BY(mutex_);    // by number: upload order
  uint64_t next_ PS_GUARDED_BY(mutex_) = 1;
};

}  // namespace pstrain
